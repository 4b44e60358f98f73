//! Demo tools of the "Bit Select" shop from the articles, on an embedded SQLite database.
//!
//! [`DemoDb`] holds the shop (orders, logistics, refunds, after-sale tickets,
//! products, cart, coupons, membership, knowledge base, devices), seeded from
//! the two source articles. Every order belongs to the one demo customer
//! (`u1001`); the tools act on that customer.
//!
//! | order   | product                          | status            | notes |
//! |---------|----------------------------------|-------------------|-------|
//! | `88231` | Bit S10 Pro robot vacuum         | `delivered`       | article 003; `SF1234567890`, SF Express, signed for by the recipient on 2026-06-22; **refundable** |
//! | `99001` | Bit AirX wireless earbuds        | `shipped`         | article 003 (the article shows only the plan for it, not a refund); `YT9876543210` in transit; **a refund is rejected** |
//! | `88239` | iPhone 18 Pro Max 256GB          | `paid`            | article 000's order to cancel; used coupon `C003` |
//! | `88240` | Bit BandPro over-ear headphones  | `pending_payment` | for `pay_order` |
//! | `66012` | Bit Watch S3 smartwatch          | `cancelled`       | |
//! | `55008` | Bit smart plug mini ×2           | `refunded`        | refund `RF20260612001` completed |
//!
//! Statuses are snake_case: `pending_payment`, `paid`, `shipped`, `delivered`,
//! `cancelled`, `refunded`. A refund needs a `delivered` order and happens at
//! most once per order; it is recorded as `processing` and the order stays
//! `delivered` until the money is back (then `refunded`, as `55008` shows).
//! Refund ids are `RF` + the shop-local date + a 3-digit sequence of the day:
//! the first refund of 2026-06-29 is `RF20260629001` (after-sale tickets `AS…`,
//! support tickets `TK…` likewise). "Today" comes from a [`DemoClock`]: by
//! default the shop's own, which a new database starts at the articles'
//! "now", 2026-06-29 14:00 shop time, and which runs on from there.
//!
//! The tools come in the two articles' dialects, one implementation each:
//! [`article_003_tools`] (camelCase: `queryOrder {orderId}`, …) and
//! [`article_000_tools`] (snake_case: `query_order {order_id}`, …). A broken
//! business rule (unknown order, refund of an undelivered order, cancelling a
//! shipped one) is a [`ToolError::Rejected`](super::ToolError::Rejected) whose
//! message the model can relay.

mod clock;
mod db;
mod shop;
mod tools;

use std::sync::Arc;

pub use clock::{DemoClock, InvalidShopTime, ShopTime};
pub use db::{DemoDb, DemoDbError, OrderStatus, Refund, RefundStatus};

use super::registry::RegisterError;
use super::{Tool, ToolRegistry};
use tools::{DemoTool, Dialect, Operation};

/// Article 003's five tools: `queryOrder`, `queryLogistics`, `applyRefund`
/// (write), `searchKnowledge`, `getCurrentTime`.
const ARTICLE_003: [Operation; 5] = [
    Operation::QueryOrder,
    Operation::QueryLogistics,
    Operation::ApplyRefund,
    Operation::SearchKnowledge,
    Operation::GetCurrentTime,
];

/// Article 000's seventeen tools. The six unlock tools (see
/// [`ARTICLE_000_SKILL_UNLOCKS`]) are writes; `submit_ticket` is a write that
/// no skill unlocks, as in the article.
const ARTICLE_000: [Operation; 17] = [
    Operation::SearchKnowledge,
    Operation::QueryOrder,
    Operation::QueryLogistics,
    Operation::CancelOrder,
    Operation::ChangeAddress,
    Operation::ApplyAfterSale,
    Operation::QueryAfterSale,
    Operation::SearchProduct,
    Operation::QueryCart,
    Operation::UpdateCartItem,
    Operation::CreateOrder,
    Operation::PayOrder,
    Operation::QueryCoupons,
    Operation::QueryMember,
    Operation::SubmitTicket,
    Operation::DiagnoseDevice,
    Operation::ListDevices,
];

/// Article 000's five skills and the tools each unlocks (its `tool_ids`), for
/// demos and tests of per-round masking: 6 unlock tools in all.
pub const ARTICLE_000_SKILL_UNLOCKS: [(&str, &[&str]); 5] = [
    ("after_sale_apply", &["apply_after_sale"]),
    ("order_change", &["cancel_order", "change_address"]),
    ("fault_diagnosis", &[]),
    (
        "order_checkout",
        &["update_cart_item", "create_order", "pay_order"],
    ),
    ("iot_bundle", &[]),
];

fn build(db: Arc<DemoDb>, dialect: Dialect, operations: &[Operation]) -> Vec<Arc<dyn Tool>> {
    operations
        .iter()
        .zip(std::iter::repeat_n(db, operations.len()))
        .map(|(&operation, db)| Arc::new(DemoTool::new(operation, dialect, db)) as Arc<dyn Tool>)
        .collect()
}

/// Article 003's tools, camelCase: `queryOrder {orderId}`, `queryLogistics
/// {trackingNo}`, `applyRefund {orderId, reason}` (write), `searchKnowledge
/// {query}`, `getCurrentTime {}`.
pub fn article_003_tools(db: Arc<DemoDb>) -> Vec<Arc<dyn Tool>> {
    build(db, Dialect::Article003, &ARTICLE_003)
}

/// Article 000's 17 tools, snake_case. Writes: `cancel_order`,
/// `change_address`, `apply_after_sale`, `update_cart_item`, `create_order`,
/// `pay_order` (the six unlock tools) and `submit_ticket`. Reads:
/// `search_knowledge`, `query_order` (lists the customer's orders without
/// `order_id`), `query_logistics`, `query_after_sale`, `search_product`,
/// `query_cart`, `query_coupons`, `query_member`, `diagnose_device`,
/// `list_devices`.
pub fn article_000_tools(db: Arc<DemoDb>) -> Vec<Arc<dyn Tool>> {
    build(db, Dialect::Article000, &ARTICLE_000)
}

/// Registers every demo tool of both articles (22; the dialects' names do not
/// collide) on one shared database.
pub fn register_all(registry: &mut ToolRegistry, db: Arc<DemoDb>) -> Result<(), RegisterError> {
    article_003_tools(Arc::clone(&db))
        .into_iter()
        .chain(article_000_tools(db))
        .try_for_each(|tool| registry.register(tool))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::{Value, json};

    use super::*;
    use crate::tools::{Access, ToolError};

    fn fixed_clock() -> DemoClock {
        DemoClock::Fixed("2026-06-29 14:00:00".parse().unwrap())
    }

    fn shop() -> (Arc<DemoDb>, ToolRegistry) {
        let db = Arc::new(DemoDb::in_memory().unwrap().with_clock(fixed_clock()));
        let mut registry = ToolRegistry::new();
        register_all(&mut registry, Arc::clone(&db)).unwrap();
        (db, registry)
    }

    fn rejection(result: Result<Value, ToolError>) -> String {
        match result {
            Err(ToolError::Rejected(message)) => message,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn refund_of_delivered_order_writes_a_refund_row() {
        let (db, registry) = shop();
        let answer = registry
            .call(
                "applyRefund",
                json!({"orderId": "88231", "reason": "the vacuum stopped working"}),
            )
            .await
            .unwrap();
        assert_eq!(
            answer,
            json!({
                "success": true,
                "refundId": "RF20260629001",
                "orderId": "88231",
                "product": "Bit S10 Pro robot vacuum",
                "amount": 2999.0,
                "status": "processing",
                "estimatedArrival": "1-3 business days",
            })
        );
        let refunds = db.refunds_for("88231").unwrap();
        assert_eq!(
            refunds,
            vec![Refund {
                refund_id: "RF20260629001".to_owned(),
                order_id: "88231".to_owned(),
                reason: "the vacuum stopped working".to_owned(),
                amount_cents: 299_900,
                status: RefundStatus::Processing,
                created_at: "2026-06-29 14:00:00".to_owned(),
            }]
        );
        // The order stays delivered while the refund is processing.
        assert_eq!(
            db.order_status("88231").unwrap(),
            Some(OrderStatus::Delivered)
        );
        let order = registry
            .call("queryOrder", json!({"orderId": "88231"}))
            .await
            .unwrap();
        assert_eq!(
            order["refund"],
            json!({"refundId": "RF20260629001", "status": "processing"})
        );
    }

    #[tokio::test]
    async fn refund_of_undelivered_order_is_rejected_and_writes_nothing() {
        let (db, registry) = shop();
        let message = rejection(
            registry
                .call(
                    "applyRefund",
                    json!({"orderId": "99001", "reason": "the earbuds crackle"}),
                )
                .await,
        );
        assert_eq!(
            message,
            "order 99001 is shipped; a refund needs the order to be delivered"
        );
        assert!(db.refunds_for("99001").unwrap().is_empty());
        assert_eq!(
            db.order_status("99001").unwrap(),
            Some(OrderStatus::Shipped)
        );
    }

    #[tokio::test]
    async fn a_refund_refused_before_delivery_says_what_the_policy_offers_instead() {
        let (db, registry) = shop();
        let refused = async |order: &str| {
            rejection(
                registry
                    .call("applyRefund", json!({"orderId": order, "reason": "x"}))
                    .await,
            )
        };
        let unpaid = refused("88240").await;
        assert!(unpaid.contains("has not been paid"), "{unpaid}");
        let cancelled = refused("66012").await;
        assert!(cancelled.contains("nothing to refund"), "{cancelled}");
        assert!(!cancelled.contains("delivered"), "{cancelled}");
        for order in ["88240", "66012"] {
            assert!(db.refunds_for(order).unwrap().is_empty());
        }
    }

    #[tokio::test]
    async fn second_refund_of_an_order_is_rejected() {
        let (db, registry) = shop();
        let refund = json!({"orderId": "88231", "reason": "broken"});
        registry.call("applyRefund", refund.clone()).await.unwrap();
        let message = rejection(registry.call("applyRefund", refund).await);
        assert!(
            message.contains("already has refund RF20260629001"),
            "{message}"
        );
        assert_eq!(db.refunds_for("88231").unwrap().len(), 1);
        // The same order through article 000's after-sale route is refused too.
        let message = rejection(
            registry
                .call(
                    "apply_after_sale",
                    json!({"order_id": "88231", "type": "return", "reason": "broken"}),
                )
                .await,
        );
        assert!(message.contains("already has refund"), "{message}");
    }

    #[tokio::test]
    async fn a_refund_and_an_after_sale_request_on_one_order_exclude_each_other() {
        // Refunded: no exchange or repair on top.
        let (_db, registry) = shop();
        registry
            .call(
                "applyRefund",
                json!({"orderId": "88231", "reason": "broken"}),
            )
            .await
            .unwrap();
        for kind in ["exchange", "repair"] {
            let message = rejection(
                registry
                    .call(
                        "apply_after_sale",
                        json!({"order_id": "88231", "type": kind, "reason": "x"}),
                    )
                    .await,
            );
            assert_eq!(
                message,
                "order 88231 already has refund RF20260629001 (processing); a refunded order \
                 cannot also be exchanged or repaired",
                "{kind}"
            );
        }
        let tickets = registry
            .call("query_after_sale", json!({"order_id": "88231"}))
            .await
            .unwrap();
        assert_eq!(tickets["count"], 0);

        // An exchange or a repair in progress: no refund meanwhile.
        for kind in ["exchange", "repair"] {
            let (db, registry) = shop();
            registry
                .call(
                    "apply_after_sale",
                    json!({"order_id": "88231", "type": kind, "reason": "E05"}),
                )
                .await
                .unwrap();
            let message = rejection(
                registry
                    .call(
                        "applyRefund",
                        json!({"orderId": "88231", "reason": "broken"}),
                    )
                    .await,
            );
            assert_eq!(
                message,
                format!(
                    "order 88231 has after-sale ticket AS20260629001 ({kind}, pending_review) in \
                     progress; a refund can be requested once that ticket is resolved"
                )
            );
            assert!(db.refunds_for("88231").unwrap().is_empty());
        }
    }

    #[tokio::test]
    async fn unknown_order_is_a_business_answer() {
        let (db, registry) = shop();
        for (tool, arguments) in [
            ("queryOrder", json!({"orderId": "12345"})),
            ("applyRefund", json!({"orderId": "12345", "reason": "x"})),
            ("query_order", json!({"order_id": "12345"})),
            ("cancel_order", json!({"order_id": "12345"})),
        ] {
            let message = rejection(registry.call(tool, arguments).await);
            assert_eq!(message, "order 12345 not found", "{tool}");
        }
        assert_eq!(db.order_status("12345").unwrap(), None);
        assert!(db.refunds_for("12345").unwrap().is_empty());
    }

    /// The test runs on one thread: had the call waited for the lock on it,
    /// this test could not go on to release the lock, and the call would
    /// fail with "database is locked" after SQLite's busy timeout.
    #[tokio::test]
    async fn a_file_database_call_waiting_for_another_writer_holds_up_no_other_task() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shop.sqlite");
        let db = Arc::new(DemoDb::open(&path).unwrap().with_clock(fixed_clock()));
        let mut registry = ToolRegistry::new();
        register_all(&mut registry, db.clone()).unwrap();
        let other_process = rusqlite::Connection::open(&path).unwrap();
        other_process.execute_batch("BEGIN IMMEDIATE").unwrap();

        let refund = tokio::spawn(async move {
            registry
                .call(
                    "applyRefund",
                    json!({"orderId": "88231", "reason": "broken"}),
                )
                .await
        });
        tokio::task::yield_now().await;
        assert!(!refund.is_finished(), "the call waits for the write lock");
        other_process.execute_batch("COMMIT").unwrap();

        let answer = refund
            .await
            .unwrap()
            .expect("refunded once the lock is free");
        assert_eq!(answer["refundId"], "RF20260629001");
        assert_eq!(db.refunds_for("88231").unwrap().len(), 1);
    }

    #[tokio::test]
    async fn writes_persist_across_reopening_a_file_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shop.sqlite");
        {
            let db = Arc::new(DemoDb::open(&path).unwrap().with_clock(fixed_clock()));
            let tools = article_003_tools(db);
            let refund = tools
                .iter()
                .find(|tool| tool.spec().name == "applyRefund")
                .unwrap();
            refund
                .invoke(
                    &crate::tools::ToolContext::new(),
                    json!({"orderId": "88231", "reason": "broken"}),
                )
                .await
                .unwrap();
        }
        let db = Arc::new(DemoDb::open(&path).unwrap().with_clock(fixed_clock()));
        let refunds = db.refunds_for("88231").unwrap();
        assert_eq!(refunds.len(), 1);
        assert_eq!(refunds[0].refund_id, "RF20260629001");
        // Reopening did not seed again: still the six seeded orders.
        let mut registry = ToolRegistry::new();
        register_all(&mut registry, db).unwrap();
        let orders = registry.call("query_order", json!({})).await.unwrap();
        assert_eq!(orders["count"], 6);
        let message = rejection(
            registry
                .call(
                    "applyRefund",
                    json!({"orderId": "88231", "reason": "again"}),
                )
                .await,
        );
        assert!(message.contains("already has refund"), "{message}");
    }

    #[tokio::test]
    async fn validation_errors_name_the_field() {
        let (_db, registry) = shop();
        let cases = [
            ("applyRefund", json!({"reason": "broken"}), "orderId"),
            (
                "applyRefund",
                json!({"orderId": 88231, "reason": "x"}),
                "orderId",
            ),
            ("query_order", json!({"orderId": "88231"}), "orderId"),
            (
                "pay_order",
                json!({"order_id": "88240", "method": "cash"}),
                "method",
            ),
            (
                "update_cart_item",
                json!({"product_id": "P1001", "quantity": -1}),
                "quantity",
            ),
        ];
        for (tool, arguments, field) in cases {
            match registry.call(tool, arguments).await {
                Err(ToolError::InvalidArguments {
                    tool: name,
                    message,
                }) => {
                    assert_eq!(name, tool);
                    assert!(message.contains(field), "{tool}: {message}");
                }
                other => panic!("{tool}: expected invalid arguments, got {other:?}"),
            }
        }
        // At least one of the optional lookups must be given.
        let error = registry.call("query_after_sale", json!({})).await;
        assert!(matches!(error, Err(ToolError::InvalidArguments { .. })));
    }

    /// JSON Schema counts `2.0` as an integer, so the registry passes it;
    /// the tool must not then blame the model for it.
    #[tokio::test]
    async fn a_whole_number_written_as_a_float_is_an_integer() {
        let (_db, registry) = shop();
        let answer = registry
            .call(
                "update_cart_item",
                json!({"product_id": "P1007", "quantity": 3.0}),
            )
            .await
            .unwrap();
        assert_eq!(answer["cart"]["items"][1]["product_id"], "P1007");
        assert_eq!(answer["cart"]["items"][1]["quantity"], 3);
        // A fraction is not one: refused by the schema, the field named.
        match registry
            .call(
                "update_cart_item",
                json!({"product_id": "P1007", "quantity": 2.5}),
            )
            .await
        {
            Err(ToolError::InvalidArguments { message, .. }) => {
                assert!(message.contains("quantity"), "{message}");
            }
            other => panic!("expected invalid arguments, got {other:?}"),
        }
    }

    #[test]
    fn article_000_has_17_tools_of_which_the_6_unlock_tools_are_writes() {
        let db = Arc::new(DemoDb::in_memory().unwrap());
        let tools = article_000_tools(db);
        assert_eq!(tools.len(), 17);
        let names: BTreeSet<&str> = tools.iter().map(|t| t.spec().name.as_str()).collect();
        assert_eq!(names.len(), 17);
        let unlocks: BTreeSet<&str> = ARTICLE_000_SKILL_UNLOCKS
            .iter()
            .flat_map(|(_, tools)| tools.iter().copied())
            .collect();
        assert_eq!(unlocks.len(), 6);
        assert!(unlocks.is_subset(&names));
        let writes: BTreeSet<&str> = tools
            .iter()
            .filter(|t| t.spec().access == Access::Write)
            .map(|t| t.spec().name.as_str())
            .collect();
        // The article: submit_ticket writes too but is in no skill's tool_ids.
        let mut expected = unlocks.clone();
        expected.insert("submit_ticket");
        assert_eq!(writes, expected);
        // 17 registered, 6 masked before any skill is loaded: 11 visible.
        assert_eq!(names.difference(&unlocks).count(), 11);
    }

    #[test]
    fn every_schema_is_closed_and_names_follow_the_dialect() {
        let db = Arc::new(DemoDb::in_memory().unwrap());
        let article_003 = article_003_tools(Arc::clone(&db));
        let names: Vec<&str> = article_003.iter().map(|t| t.spec().name.as_str()).collect();
        assert_eq!(
            names,
            [
                "queryOrder",
                "queryLogistics",
                "applyRefund",
                "searchKnowledge",
                "getCurrentTime"
            ]
        );
        let refund = &article_003[2].spec().parameters;
        assert_eq!(refund["required"], json!(["orderId", "reason"]));
        for tool in article_003.iter().chain(&article_000_tools(db)) {
            let parameters = &tool.spec().parameters;
            assert_eq!(parameters["type"], "object", "{}", tool.spec().name);
            assert_eq!(
                parameters["additionalProperties"],
                false,
                "{}",
                tool.spec().name
            );
            assert!(parameters["required"].is_array(), "{}", tool.spec().name);
            assert!(!tool.spec().description.is_empty());
        }
    }

    #[tokio::test]
    async fn query_order_and_logistics_answer_in_the_articles_shape() {
        let (_db, registry) = shop();
        let order = registry
            .call("queryOrder", json!({"orderId": "88231"}))
            .await
            .unwrap();
        assert_eq!(order["orderId"], "88231");
        assert_eq!(order["product"], "Bit S10 Pro robot vacuum");
        assert_eq!(order["amount"], 2999.0);
        assert_eq!(order["status"], "delivered");
        assert_eq!(order["trackingNo"], "SF1234567890");
        assert_eq!(order["createdAt"], "2026-06-18 10:21:00");
        assert_eq!(order["refund"], Value::Null);
        let unshipped = registry
            .call("query_order", json!({"order_id": "88239"}))
            .await
            .unwrap();
        assert_eq!(unshipped["tracking_no"], Value::Null);
        assert_eq!(unshipped["status"], "paid");

        let logistics = registry
            .call("queryLogistics", json!({"trackingNo": "SF1234567890"}))
            .await
            .unwrap();
        assert_eq!(logistics["carrier"], "SF Express");
        assert_eq!(logistics["status"], "delivered");
        assert_eq!(logistics["signedBy"], "the recipient, in person");
        let events = logistics["events"].as_array().unwrap();
        assert_eq!(events.len(), 5);
        assert_eq!(events[4]["time"], "2026-06-22 14:32:00");
        // As a person types it: found, and answered as the carrier writes it.
        let typed = registry
            .call("queryLogistics", json!({"trackingNo": "sf1234567890"}))
            .await
            .unwrap();
        assert_eq!(typed, logistics);
        let message = rejection(
            registry
                .call("query_logistics", json!({"tracking_no": "SF0000000000"}))
                .await,
        );
        assert_eq!(message, "tracking number SF0000000000 not found");
    }

    #[tokio::test]
    async fn cancelling_follows_the_status() {
        let (db, registry) = shop();
        // Paid, not shipped: cancelled, refunded in full, coupon returned.
        let answer = registry
            .call(
                "cancel_order",
                json!({"order_id": "88239", "reason": "changed my mind"}),
            )
            .await
            .unwrap();
        assert_eq!(answer["status"], "cancelled");
        assert_eq!(answer["refund"]["refund_id"], "RF20260629001");
        assert_eq!(answer["refund"]["amount"], 9899.0);
        assert_eq!(answer["coupon_returned"], "C003");
        assert_eq!(
            db.order_status("88239").unwrap(),
            Some(OrderStatus::Cancelled)
        );
        let coupons = registry.call("query_coupons", json!({})).await.unwrap();
        assert_eq!(coupons["coupons"][2]["coupon_id"], "C003");
        assert_eq!(coupons["coupons"][2]["status"], "available");
        // The day's refund sequence continues across tools.
        let refund = registry
            .call(
                "applyRefund",
                json!({"orderId": "88231", "reason": "broken"}),
            )
            .await
            .unwrap();
        assert_eq!(refund["refundId"], "RF20260629002");
        // Awaiting payment: cancelled without a refund.
        let answer = registry
            .call("cancel_order", json!({"order_id": "88240"}))
            .await
            .unwrap();
        assert_eq!(answer["refund"], Value::Null);
        // Shipped or delivered: refused, nothing changes.
        for (order_id, status, why) in [
            (
                "99001",
                OrderStatus::Shipped,
                "has shipped and can no longer be cancelled",
            ),
            (
                "88231",
                OrderStatus::Delivered,
                "is delivered; cancelling is only possible before shipping",
            ),
        ] {
            let message = rejection(
                registry
                    .call("cancel_order", json!({"order_id": order_id}))
                    .await,
            );
            assert!(
                message.starts_with(&format!("order {order_id} {why}")),
                "{message}"
            );
            assert_eq!(db.order_status(order_id).unwrap(), Some(status));
        }
        let message = rejection(
            registry
                .call(
                    "change_address",
                    json!({"order_id": "99001", "address": "1 Other Road, Guangzhou"}),
                )
                .await,
        );
        assert!(message.contains("before the order ships"), "{message}");
    }

    #[tokio::test]
    async fn refusals_give_the_reason_of_the_order_at_hand() {
        let (db, registry) = shop();
        // The address: a reason per status, as for cancelling.
        for (order_id, why) in [
            (
                "66012",
                "is cancelled; nothing will be delivered to any address",
            ),
            (
                "88231",
                "is delivered already; the address can only be changed before the order ships",
            ),
            (
                "55008",
                "was delivered and refunded; the address can only be changed before the order \
                 ships",
            ),
        ] {
            let message = rejection(
                registry
                    .call(
                        "change_address",
                        json!({"order_id": order_id, "address": "1 Other Road, Guangzhou"}),
                    )
                    .await,
            );
            assert_eq!(message, format!("order {order_id} {why}"));
        }

        // A refund of an order cancelled after payment: it was refunded by
        // the cancellation, not "refunded only once".
        registry
            .call("cancel_order", json!({"order_id": "88239"}))
            .await
            .unwrap();
        let message = rejection(
            registry
                .call("applyRefund", json!({"orderId": "88239", "reason": "x"}))
                .await,
        );
        assert_eq!(
            message,
            "order 88239 was cancelled and its payment refunded in full (refund RF20260629001, \
             processing); there is nothing left to refund"
        );

        // A ticket asked for on the wrong order names its own order; a
        // ticket of another customer's order stays unknown.
        let message = rejection(
            registry
                .call(
                    "query_after_sale",
                    json!({"order_id": "88231", "ticket_id": "AS20260612001"}),
                )
                .await,
        );
        assert_eq!(
            message,
            "after-sale ticket AS20260612001 belongs to order 55008, not to order 88231"
        );
        db.lock()
            .execute_batch(
                "INSERT INTO customers VALUES ('u2002', 'Li Na', 'silver', 0, '139****0000', 'x');
                 INSERT INTO orders VALUES ('77001', 'u2002', 100, 'delivered', NULL, 'x', NULL,
                     'card', NULL, '2026-06-20 10:00:00');
                 INSERT INTO after_sales VALUES ('AS20260621001', '77001', 'repair', 'x',
                     'pending_review', '2026-06-21 10:00:00');",
            )
            .unwrap();
        for ticket_id in ["AS20260621001", "AS20990101001"] {
            let message = rejection(
                registry
                    .call(
                        "query_after_sale",
                        json!({"order_id": "88231", "ticket_id": ticket_id}),
                    )
                    .await,
            );
            assert_eq!(message, format!("after-sale ticket {ticket_id} not found"));
        }
    }

    #[tokio::test]
    async fn checkout_from_cart_to_paid_order() {
        let (db, registry) = shop();
        let cart = registry.call("query_cart", json!({})).await.unwrap();
        assert_eq!(cart["total"], 1377.0);
        registry
            .call(
                "update_cart_item",
                json!({"product_id": "P1007", "quantity": 0}),
            )
            .await
            .unwrap();
        let message = rejection(
            registry
                .call(
                    "update_cart_item",
                    json!({"product_id": "P1005", "quantity": 20}),
                )
                .await,
        );
        assert_eq!(message, "only 15 of product P1005 in stock");
        let message = rejection(
            registry
                .call("create_order", json!({"coupon_id": "C004"}))
                .await,
        );
        assert_eq!(message, "coupon C004 expired on 2026-06-01");
        // A code as a person types it is the coupon it names.
        let order = registry
            .call("create_order", json!({"coupon_id": " c001"}))
            .await
            .unwrap();
        assert_eq!(order["coupon_id"], "C001");
        let coupons = registry.call("query_coupons", json!({})).await.unwrap();
        assert_eq!(coupons["coupons"][0]["coupon_id"], "C001");
        assert_eq!(coupons["coupons"][0]["used_by_order"], "99002");
        assert_eq!(order["order_id"], "99002");
        assert_eq!(order["subtotal"], 1299.0);
        assert_eq!(order["amount"], 1199.0);
        assert_eq!(
            db.order_status("99002").unwrap(),
            Some(OrderStatus::PendingPayment)
        );
        let cart = registry.call("query_cart", json!({})).await.unwrap();
        assert_eq!(cart["item_count"], 0);
        let message = rejection(registry.call("create_order", json!({})).await);
        assert!(message.starts_with("the cart is empty"), "{message}");
        let paid = registry
            .call(
                "pay_order",
                json!({"order_id": "99002", "method": "alipay"}),
            )
            .await
            .unwrap();
        assert_eq!(paid["status"], "paid");
        let message = rejection(
            registry
                .call(
                    "pay_order",
                    json!({"order_id": "99002", "method": "alipay"}),
                )
                .await,
        );
        assert!(message.contains("is paid"), "{message}");
    }

    #[tokio::test]
    async fn the_cart_finds_products_as_the_catalogue_does_and_says_when_nothing_is_removed() {
        let (_db, registry) = shop();
        let found = registry
            .call("search_product", json!({"product_id": "p1007"}))
            .await
            .unwrap();
        assert_eq!(found["products"][0]["product_id"], "P1007");
        let answer = registry
            .call(
                "update_cart_item",
                json!({"product_id": "p1007", "quantity": 3}),
            )
            .await
            .unwrap();
        let items = answer["cart"]["items"].as_array().unwrap();
        assert_eq!(items.len(), 2, "no second line for another spelling");
        assert_eq!(items[1]["product_id"], "P1007");
        assert_eq!(items[1]["quantity"], 3);

        let message = rejection(
            registry
                .call(
                    "update_cart_item",
                    json!({"product_id": "P1006", "quantity": 0}),
                )
                .await,
        );
        assert_eq!(
            message,
            "product P1006 (Bit smart plug mini) is not in the cart, so there is nothing to remove"
        );
        let answer = registry
            .call(
                "update_cart_item",
                json!({"product_id": "p1007", "quantity": 0}),
            )
            .await
            .unwrap();
        assert_eq!(answer["cart"]["item_count"], 1);
    }

    #[tokio::test]
    async fn after_sale_tickets_are_numbered_and_one_at_a_time() {
        let (_db, registry) = shop();
        let ticket = registry
            .call(
                "apply_after_sale",
                json!({"order_id": "88231", "type": "repair", "reason": "E05 keeps coming back"}),
            )
            .await
            .unwrap();
        assert_eq!(ticket["ticket_id"], "AS20260629001");
        assert_eq!(ticket["status"], "pending_review");
        let message = rejection(
            registry
                .call(
                    "apply_after_sale",
                    json!({"order_id": "88231", "type": "exchange", "reason": "x"}),
                )
                .await,
        );
        assert!(message.contains("AS20260629001"), "{message}");
        let message = rejection(
            registry
                .call(
                    "apply_after_sale",
                    json!({"order_id": "99001", "type": "return", "reason": "x"}),
                )
                .await,
        );
        assert!(
            message.contains("needs the order to be delivered"),
            "{message}"
        );
        let found = registry
            .call("query_after_sale", json!({"order_id": "88231"}))
            .await
            .unwrap();
        assert_eq!(found["count"], 1);
        let found = registry
            .call("query_after_sale", json!({"ticket_id": "AS20260612001"}))
            .await
            .unwrap();
        assert_eq!(found["tickets"][0]["status"], "completed");
    }

    #[tokio::test]
    async fn knowledge_products_and_diagnosis_understand_english_and_chinese() {
        let (_db, registry) = shop();
        for (query, first) in [
            ("退款政策", "KB001"),
            ("refund policy", "KB001"),
            ("robot vacuum does not pick up dust", "KB004"),
            ("扫地机不吸灰怎么办", "KB004"),
        ] {
            let found = registry
                .call("searchKnowledge", json!({"query": query}))
                .await
                .unwrap();
            assert_eq!(found["results"][0]["articleId"], first, "{query}");
        }
        let none = registry
            .call("search_knowledge", json!({"query": "zzz"}))
            .await
            .unwrap();
        assert_eq!(none["count"], 0);

        let products = registry
            .call("search_product", json!({"keyword": "耳机"}))
            .await
            .unwrap();
        assert_eq!(products["count"], 2);

        let diagnosis = registry
            .call(
                "diagnose_device",
                json!({"device": "S10 Pro", "symptom": "it does not pick up dust any more"}),
            )
            .await
            .unwrap();
        assert_eq!(diagnosis["target"]["device_id"], "D-S10-7781");
        assert!(diagnosis["findings"][0].as_str().unwrap().contains("E05"));
        assert!(
            diagnosis["likely_causes"][0]["cause"]
                .as_str()
                .unwrap()
                .contains("dustbin")
        );
        // The error the vacuum reports, as deviceCheckup passes it on.
        let diagnosis = registry
            .call(
                "diagnose_device",
                json!({"device": "D-S10-7781", "symptom": "E05: main brush blocked"}),
            )
            .await
            .unwrap();
        assert!(
            diagnosis["likely_causes"][0]["cause"]
                .as_str()
                .unwrap()
                .starts_with("Error E05"),
            "{diagnosis}"
        );
        let message = rejection(
            registry
                .call(
                    "diagnose_device",
                    json!({"device": "toaster", "symptom": "burns bread"}),
                )
                .await,
        );
        assert!(message.contains("D-S10-7781"), "{message}");
    }

    #[tokio::test]
    async fn current_time_reads_the_clock() {
        let (_db, registry) = shop();
        let now = registry.call("getCurrentTime", json!({})).await.unwrap();
        assert_eq!(
            now,
            json!({
                "now": "2026-06-29 14:00:00",
                "date": "2026-06-29",
                "weekday": "Monday",
                "timeZone": "Asia/Shanghai",
                "utcOffset": "+08:00",
                "iso8601": "2026-06-29T14:00:00+08:00",
            })
        );
    }

    /// The seed is dated around the articles' "now": on the machine's clock
    /// (December 2026 when this was written) every seeded coupon had expired
    /// and 88231 was months past its 7-day return window.
    #[tokio::test]
    async fn a_new_shop_runs_on_the_articles_clock_and_a_reopened_one_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shop.sqlite");
        let mut registry = ToolRegistry::new();
        register_all(&mut registry, Arc::new(DemoDb::open(&path).unwrap())).unwrap();
        let now = registry.call("getCurrentTime", json!({})).await.unwrap();
        assert_eq!(now["date"], "2026-06-29", "{now}");
        assert!(now["now"].as_str().unwrap() >= "2026-06-29 14:00:00");
        let refund = registry
            .call(
                "applyRefund",
                json!({"orderId": "88231", "reason": "broken"}),
            )
            .await
            .unwrap();
        assert_eq!(refund["refundId"], "RF20260629001");
        let order = registry
            .call("create_order", json!({"coupon_id": "C001"}))
            .await
            .unwrap();
        assert_eq!(order["discount"], 100.0);
        drop(registry);

        // A day passes on the machine's clock: the shop's moves on with it.
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch(
                "UPDATE shop_clock SET machine_started_at = datetime(machine_started_at, '-1 day')",
            )
            .unwrap();
        let reopened = DemoDb::open(&path).unwrap();
        assert_eq!(reopened.clock().now().date(), "2026-06-30");
    }

    #[test]
    fn a_database_from_a_newer_build_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shop.sqlite");
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", 3).unwrap();
        drop(conn);
        let error = DemoDb::open(&path).err().expect("refused");
        assert!(matches!(
            error,
            DemoDbError::UnsupportedSchema {
                found: 3,
                supported: 2,
                ..
            }
        ));
        let message = error.to_string();
        assert!(message.contains(&path.display().to_string()) && message.contains("delete it"));
    }
}
