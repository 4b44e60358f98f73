//! The shop's business operations, one per tool. Each takes typed arguments,
//! enforces the shop's rules, and answers with JSON whose keys are snake_case
//! (the tool layer renames them for the camelCase dialect).
//!
//! A broken rule is [`OpError::Rejected`] with a sentence the model can relay
//! to the customer; writes run in one transaction each.

use std::cmp::Reverse;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Deserialize;
use serde_json::{Value, json};

use super::clock::{SHOP_TIME_ZONE, SHOP_UTC_OFFSET, ShopTime};
use super::db::{CachedStatements, DemoDb, OrderStatus, RefundStatus, write_transaction};
use crate::tools::ToolError;

/// The one customer of the demo shop, whose orders, cart, coupons and devices
/// the tools act on (a real deployment takes this from the session).
pub(super) const DEMO_CUSTOMER: &str = "u1001";
const REFUND_ARRIVAL: &str = "1-3 business days";
/// Words too common to say anything about relevance.
const STOP_WORDS: [&str; 24] = [
    "a", "an", "and", "are", "can", "do", "does", "for", "get", "how", "i", "in", "is", "it", "me",
    "my", "not", "of", "on", "the", "to", "up", "what", "why",
];

/// Why an operation did not happen.
#[derive(Debug)]
pub(super) enum OpError {
    /// A business rule said no; the text is for the model (and the customer).
    Rejected(String),
    /// The shop could not do it, e.g. the day's id sequence is used up.
    Failed(String),
    Db(rusqlite::Error),
}

impl From<rusqlite::Error> for OpError {
    fn from(error: rusqlite::Error) -> Self {
        Self::Db(error)
    }
}

impl From<OpError> for ToolError {
    fn from(error: OpError) -> Self {
        match error {
            OpError::Rejected(message) => Self::Rejected(message),
            OpError::Failed(message) => Self::Failed(message),
            OpError::Db(error) => Self::Failed(format!("demo database: {error}")),
        }
    }
}

/// What an after-sale ticket asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum AfterSaleKind {
    Refund,
    Return,
    Exchange,
    Repair,
}

impl AfterSaleKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Refund => "refund",
            Self::Return => "return",
            Self::Exchange => "exchange",
            Self::Repair => "repair",
        }
    }

    fn next_step(self) -> &'static str {
        match self {
            Self::Refund => {
                "Customer service reviews the request within 24 hours; the money then goes back to the original payment method in 1-3 business days."
            }
            Self::Return => {
                "After approval a courier collects the item; the refund follows once it reaches the warehouse."
            }
            Self::Exchange => {
                "After approval a courier collects the item; the replacement ships when it reaches the warehouse."
            }
            Self::Repair => {
                "After approval the customer sends the item in with a prepaid label; repairs take 5-7 days."
            }
        }
    }
}

/// How an order is paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum PaymentMethod {
    Alipay,
    WechatPay,
    Card,
}

impl PaymentMethod {
    fn as_str(self) -> &'static str {
        match self {
            Self::Alipay => "alipay",
            Self::WechatPay => "wechat_pay",
            Self::Card => "card",
        }
    }
}

/// Ids of the form prefix + shop-local date + 3-digit sequence of the day.
#[derive(Clone, Copy)]
enum DailyId {
    Refund,
    AfterSale,
    SupportTicket,
}

impl DailyId {
    /// Prefix, table and column; fixed strings, never input.
    fn parts(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::Refund => ("RF", "refunds", "refund_id"),
            Self::AfterSale => ("AS", "after_sales", "ticket_id"),
            Self::SupportTicket => ("TK", "support_tickets", "ticket_id"),
        }
    }

    /// The next id of the day, e.g. `RF20260629001` for the first refund of
    /// 29 June 2026.
    fn next(self, conn: &Connection, now: ShopTime) -> Result<String, OpError> {
        let (prefix, table, column) = self.parts();
        let stem = format!("{prefix}{}", now.compact_date());
        let last: Option<i64> = conn.query_row_cached(
            &format!(
                "SELECT MAX(CAST(substr({column}, length(?1) + 1) AS INTEGER)) FROM {table} \
                 WHERE {column} LIKE ?1 || '%'"
            ),
            params![stem],
            |row| row.get(0),
        )?;
        let next = last.unwrap_or(0) + 1;
        if next > 999 {
            return Err(OpError::Failed(format!(
                "no more {prefix} ids today: the daily sequence ends at {stem}999"
            )));
        }
        Ok(format!("{stem}{next:03}"))
    }
}

/// An object of owned values, moved in: `json!` serializes each value by
/// reference, which copies every string and nested value once more.
fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::from_iter(fields)
}

/// Cents as a JSON number of yuan: 299900 → 2999.0.
fn money(cents: i64) -> Value {
    json!(cents as f64 / 100.0)
}

/// Cents as text for messages: 299900 → "CNY 2999.00".
fn money_text(cents: i64) -> String {
    format!("CNY {}.{:02}", cents / 100, cents % 100)
}

/// How well `query` matches: the query's words found in `text`, plus the
/// `keywords` (space-separated) found in the query. The second half lets
/// unsegmented Chinese queries match (e.g. "扫地机不吸灰" contains "吸灰").
fn relevance(query: &str, text: &str, keywords: &str) -> usize {
    let query = query.to_lowercase();
    let text = text.to_lowercase();
    let forward = query
        .split(|c: char| !c.is_alphanumeric() && c != '-')
        .filter(|term| term.chars().count() >= 2 && !STOP_WORDS.contains(term))
        .filter(|term| text.contains(term))
        .count();
    let backward = keywords
        .split_whitespace()
        .filter(|keyword| keyword.chars().count() >= 2 && query.contains(&keyword.to_lowercase()))
        .count();
    forward + backward
}

/// An order of the demo customer.
struct Order {
    order_id: String,
    amount_cents: i64,
    status: OrderStatus,
    tracking_no: Option<String>,
    address: String,
    coupon_id: Option<String>,
    payment_method: Option<String>,
    cancel_reason: Option<String>,
    created_at: String,
}

// The statements `query_order` and `query_logistics` run are constants, so
// that a test can find them in the statement cache (see `tests`).

const FIND_ORDER: &str = "
    SELECT order_id, amount_cents, status, tracking_no, address, coupon_id, payment_method,
           cancel_reason, created_at
    FROM orders WHERE order_id = ?1 AND customer_id = ?2";

/// The demo customer's order, or a rejection naming the missing id.
fn find_order(conn: &Connection, order_id: &str) -> Result<Order, OpError> {
    conn.query_row_cached(FIND_ORDER, params![order_id, DEMO_CUSTOMER], |row| {
        Ok(Order {
            order_id: row.get(0)?,
            amount_cents: row.get(1)?,
            status: row.get(2)?,
            tracking_no: row.get(3)?,
            address: row.get(4)?,
            coupon_id: row.get(5)?,
            payment_method: row.get(6)?,
            cancel_reason: row.get(7)?,
            created_at: row.get(8)?,
        })
    })
    .optional()?
    .ok_or_else(|| OpError::Rejected(format!("order {order_id} not found")))
}

/// A line of an order or of the cart.
struct Line {
    product_id: String,
    name: String,
    quantity: i64,
    unit_price_cents: i64,
}

impl Line {
    /// The line in columns 0 to 3: product id, name, quantity, unit price.
    fn from_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            product_id: row.get(0)?,
            name: row.get(1)?,
            quantity: row.get(2)?,
            unit_price_cents: row.get(3)?,
        })
    }

    fn json(self) -> Value {
        object([
            ("product_id", self.product_id.into()),
            ("name", self.name.into()),
            ("quantity", self.quantity.into()),
            ("unit_price", money(self.unit_price_cents)),
            ("subtotal", money(self.unit_price_cents * self.quantity)),
        ])
    }
}

const ORDER_LINES: &str = "
    SELECT i.product_id, p.name, i.quantity, i.unit_price_cents
    FROM order_items i JOIN products p USING (product_id)
    WHERE i.order_id = ?1 ORDER BY i.product_id";

fn order_lines(conn: &Connection, order_id: &str) -> rusqlite::Result<Vec<Line>> {
    let mut statement = conn.prepare_cached(ORDER_LINES)?;
    statement
        .query_map(params![order_id], Line::from_row)?
        .collect()
}

/// The product names of an order's lines, e.g. "Bit S10 Pro robot vacuum".
fn product_summary(lines: &[Line]) -> String {
    lines
        .iter()
        .map(|line| line.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

const REFUNDS_OF_ORDER: &str =
    "SELECT created_at, refund_id, status FROM refunds WHERE order_id = ?1";

/// The order's refund, if it has one (an order is refunded at most once;
/// should it have more, the latest).
fn refund_of(
    conn: &Connection,
    order_id: &str,
) -> rusqlite::Result<Option<(String, RefundStatus)>> {
    // The latest is picked here, not by `ORDER BY created_at DESC, refund_id
    // DESC LIMIT 1`: the index holds refunds by order only, so SQLite would
    // sort the (zero or one) rows in a temporary b-tree opened on every call.
    let mut statement = conn.prepare_cached(REFUNDS_OF_ORDER)?;
    let refunds = statement
        .query_map(params![order_id], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, RefundStatus>(2)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(refunds
        .into_iter()
        .max_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)))
        .map(|(_, refund_id, status)| (refund_id, status)))
}

/// The order's after-sale ticket that is still being handled, if any.
fn open_after_sale(
    conn: &Connection,
    order_id: &str,
) -> rusqlite::Result<Option<(String, String, String)>> {
    conn.query_row_cached(
        "SELECT ticket_id, kind, status FROM after_sales
         WHERE order_id = ?1 AND status IN ('pending_review', 'approved') LIMIT 1",
        params![order_id],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
    )
    .optional()
}

/// The order of one of the demo customer's after-sale tickets; `None` for
/// an unknown ticket, and for another customer's, which stays unknown.
fn ticket_order(conn: &Connection, ticket_id: &str) -> rusqlite::Result<Option<String>> {
    conn.query_row_cached(
        "SELECT a.order_id FROM after_sales a JOIN orders o USING (order_id)
         WHERE a.ticket_id = ?1 AND o.customer_id = ?2",
        params![ticket_id, DEMO_CUSTOMER],
        |row| row.get(0),
    )
    .optional()
}

/// Rejects what a refund of the order rules out: a second refund (or a
/// return for one), and an exchange or a repair of an item whose money went
/// back.
fn ensure_not_refunded(
    conn: &Connection,
    order: &Order,
    asked: AfterSaleKind,
) -> Result<(), OpError> {
    let Some((refund_id, status)) = refund_of(conn, &order.order_id)? else {
        return Ok(());
    };
    let order_id = &order.order_id;
    // A cancelled order with a refund was paid: `cancel_order` refunded it.
    if order.status == OrderStatus::Cancelled {
        return Err(OpError::Rejected(format!(
            "order {order_id} was cancelled and its payment refunded in full (refund {refund_id}, \
             {status}); there is nothing left to refund"
        )));
    }
    let why = match asked {
        AfterSaleKind::Refund | AfterSaleKind::Return => "an order can be refunded only once",
        AfterSaleKind::Exchange | AfterSaleKind::Repair => {
            "a refunded order cannot also be exchanged or repaired"
        }
    };
    Err(OpError::Rejected(format!(
        "order {order_id} already has refund {refund_id} ({status}); {why}"
    )))
}

const INSERT_REFUND: &str = "
    INSERT INTO refunds (refund_id, order_id, reason, amount_cents, status, created_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// Records a full refund of an order as `processing`, under the next refund
/// id of the day, which it returns.
fn insert_refund(
    conn: &Connection,
    order_id: &str,
    reason: &str,
    amount_cents: i64,
    now: ShopTime,
) -> Result<String, OpError> {
    let refund_id = DailyId::Refund.next(conn, now)?;
    conn.execute_cached(
        INSERT_REFUND,
        params![
            refund_id,
            order_id,
            reason,
            amount_cents,
            RefundStatus::Processing,
            now.to_string()
        ],
    )?;
    Ok(refund_id)
}

fn customer_address(conn: &Connection) -> rusqlite::Result<String> {
    conn.query_row_cached(
        "SELECT default_address FROM customers WHERE customer_id = ?1",
        params![DEMO_CUSTOMER],
        |row| row.get(0),
    )
}

fn cart_lines(conn: &Connection) -> rusqlite::Result<Vec<(Line, i64)>> {
    let mut statement = conn.prepare_cached(
        "SELECT c.product_id, p.name, c.quantity, p.price_cents, p.stock
         FROM cart_items c JOIN products p USING (product_id)
         WHERE c.customer_id = ?1 ORDER BY c.product_id",
    )?;
    statement
        .query_map(params![DEMO_CUSTOMER], |row| {
            Ok((Line::from_row(row)?, row.get(4)?))
        })?
        .collect()
}

fn cart_json(conn: &Connection) -> rusqlite::Result<Value> {
    let lines = cart_lines(conn)?;
    let total: i64 = lines
        .iter()
        .map(|(line, _)| line.unit_price_cents * line.quantity)
        .sum();
    let item_count: i64 = lines.iter().map(|(line, _)| line.quantity).sum();
    Ok(json!({
        "items": lines.into_iter().map(|(line, _)| line.json()).collect::<Vec<_>>(),
        "item_count": item_count,
        "total": money(total),
    }))
}

/// A product as the catalogue shows it.
struct Product {
    product_id: String,
    name: String,
    category: String,
    aliases: String,
    price_cents: i64,
    stock: i64,
    description: String,
}

impl Product {
    /// The product in the seven columns from `first` on, in field order:
    /// product_id, name, category, aliases, price_cents, stock, description.
    fn from_row(row: &Row<'_>, first: usize) -> rusqlite::Result<Self> {
        Ok(Self {
            product_id: row.get(first)?,
            name: row.get(first + 1)?,
            category: row.get(first + 2)?,
            aliases: row.get(first + 3)?,
            price_cents: row.get(first + 4)?,
            stock: row.get(first + 5)?,
            description: row.get(first + 6)?,
        })
    }

    fn json(&self) -> Value {
        json!({
            "product_id": self.product_id,
            "name": self.name,
            "category": self.category,
            "price": money(self.price_cents),
            "stock": self.stock,
            "in_stock": self.stock > 0,
            "description": self.description,
        })
    }
}

fn products(conn: &Connection) -> rusqlite::Result<Vec<Product>> {
    let mut statement = conn.prepare_cached(
        "SELECT product_id, name, category, aliases, price_cents, stock, description
         FROM products ORDER BY product_id",
    )?;
    statement
        .query_map([], |row| Product::from_row(row, 0))?
        .collect()
}

/// A device the demo customer has bound in the app.
struct Device {
    device_id: String,
    nickname: String,
    online: bool,
    firmware: String,
    error: Option<String>,
    product: Product,
}

impl Device {
    fn json(&self) -> Value {
        json!({
            "device_id": self.device_id,
            "nickname": self.nickname,
            "product_id": self.product.product_id,
            "product": self.product.name,
            "category": self.product.category,
            "online": self.online,
            "firmware": self.firmware,
            "error": self.error,
        })
    }
}

fn devices(conn: &Connection) -> rusqlite::Result<Vec<Device>> {
    let mut statement = conn.prepare_cached(
        "SELECT d.device_id, d.nickname, d.online, d.firmware, d.error,
                p.product_id, p.name, p.category, p.aliases, p.price_cents, p.stock, p.description
         FROM devices d JOIN products p USING (product_id)
         WHERE d.customer_id = ?1 ORDER BY d.device_id",
    )?;
    statement
        .query_map(params![DEMO_CUSTOMER], |row| {
            Ok(Device {
                device_id: row.get(0)?,
                nickname: row.get(1)?,
                online: row.get(2)?,
                firmware: row.get(3)?,
                error: row.get(4)?,
                product: Product::from_row(row, 5)?,
            })
        })?
        .collect()
}

/// Picks the candidate with the highest positive score (the first on ties).
fn best_match<T>(candidates: Vec<T>, score: impl Fn(&T) -> usize) -> Option<T> {
    let mut best: Option<(usize, T)> = None;
    for candidate in candidates {
        let points = score(&candidate);
        if points > 0 && best.as_ref().is_none_or(|(top, _)| points > *top) {
            best = Some((points, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// The candidates with a positive score, highest first; the sort is stable,
/// so ties keep their order.
fn ranked<T>(candidates: Vec<T>, score: impl Fn(&T) -> usize) -> Vec<T> {
    let mut scored: Vec<(usize, T)> = candidates
        .into_iter()
        .map(|candidate| (score(&candidate), candidate))
        .filter(|(points, _)| *points > 0)
        .collect();
    scored.sort_by_key(|(points, _)| Reverse(*points));
    scored.into_iter().map(|(_, candidate)| candidate).collect()
}

// A tracking number as a person or a model types it: `sf1234567890` finds
// `SF1234567890`, which the answer and the events then use.
const LOGISTICS: &str = "SELECT tracking_no, carrier, status, signed_by FROM logistics
    WHERE tracking_no = ?1 COLLATE NOCASE";
const LOGISTICS_EVENTS: &str =
    "SELECT time, description FROM logistics_events WHERE tracking_no = ?1 ORDER BY time";

impl DemoDb {
    /// One order in full: lines, amount, status, tracking number, refund.
    pub(super) fn query_order(&self, order_id: &str) -> Result<Value, OpError> {
        let conn = self.lock();
        let order = find_order(&conn, order_id)?;
        let lines = order_lines(&conn, order_id)?;
        let refund = refund_of(&conn, order_id)?;
        Ok(object([
            ("order_id", order.order_id.into()),
            ("product", product_summary(&lines).into()),
            ("items", lines.into_iter().map(Line::json).collect()),
            ("amount", money(order.amount_cents)),
            ("currency", "CNY".into()),
            ("status", order.status.as_str().into()),
            ("tracking_no", order.tracking_no.into()),
            ("address", order.address.into()),
            ("payment_method", order.payment_method.into()),
            ("coupon_id", order.coupon_id.into()),
            ("cancel_reason", order.cancel_reason.into()),
            ("created_at", order.created_at.into()),
            (
                "refund",
                refund
                    .map(|(refund_id, status)| {
                        object([
                            ("refund_id", refund_id.into()),
                            ("status", status.as_str().into()),
                        ])
                    })
                    .into(),
            ),
        ]))
    }

    /// The demo customer's orders, newest first.
    pub(super) fn list_orders(&self) -> Result<Value, OpError> {
        let conn = self.lock();
        let mut statement = conn.prepare_cached(
            "SELECT o.order_id, group_concat(p.name, ', '), o.amount_cents, o.status, o.created_at
             FROM orders o
             JOIN order_items i USING (order_id)
             JOIN products p USING (product_id)
             WHERE o.customer_id = ?1
             GROUP BY o.order_id
             ORDER BY o.created_at DESC",
        )?;
        let orders = statement
            .query_map(params![DEMO_CUSTOMER], |row| {
                Ok(json!({
                    "order_id": row.get::<_, String>(0)?,
                    "product": row.get::<_, String>(1)?,
                    "amount": money(row.get(2)?),
                    "status": row.get::<_, OrderStatus>(3)?.as_str(),
                    "created_at": row.get::<_, String>(4)?,
                }))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(json!({ "count": orders.len(), "orders": orders }))
    }

    /// A shipment: carrier, status, who signed for it, and its events.
    pub(super) fn query_logistics(&self, tracking_no: &str) -> Result<Value, OpError> {
        let conn = self.lock();
        let (tracking_no, carrier, status, signed_by): (String, String, String, Option<String>) =
            conn.query_row_cached(LOGISTICS, params![tracking_no], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .optional()?
            .ok_or_else(|| OpError::Rejected(format!("tracking number {tracking_no} not found")))?;
        let mut statement = conn.prepare_cached(LOGISTICS_EVENTS)?;
        let events = statement
            .query_map(params![tracking_no], |row| {
                Ok(object([
                    ("time", row.get::<_, String>(0)?.into()),
                    ("description", row.get::<_, String>(1)?.into()),
                ]))
            })?
            .collect::<Result<Value, _>>()?;
        Ok(object([
            ("tracking_no", tracking_no.into()),
            ("carrier", carrier.into()),
            ("status", status.into()),
            ("signed_by", signed_by.into()),
            ("events", events),
        ]))
    }

    /// Refunds a delivered order in full. The refund starts as `processing`
    /// and the order stays `delivered` until the money is back.
    pub(super) fn apply_refund(&self, order_id: &str, reason: &str) -> Result<Value, OpError> {
        let now = self.clock().now();
        let mut conn = self.lock();
        let tx = write_transaction(&mut conn)?;
        let order = find_order(&tx, order_id)?;
        ensure_not_refunded(&tx, &order, AfterSaleKind::Refund)?;
        if order.status != OrderStatus::Delivered {
            return Err(OpError::Rejected(not_refundable(order_id, order.status)));
        }
        // Any open ticket, an exchange or a repair too: refunded meanwhile,
        // the item would be paid back and also replaced or repaired.
        if let Some((ticket_id, kind, status)) = open_after_sale(&tx, order_id)? {
            return Err(OpError::Rejected(format!(
                "order {order_id} has after-sale ticket {ticket_id} ({kind}, {status}) in progress; \
                 a refund can be requested once that ticket is resolved"
            )));
        }
        let refund_id = insert_refund(&tx, order_id, reason, order.amount_cents, now)?;
        let lines = order_lines(&tx, order_id)?;
        tx.commit()?;
        Ok(json!({
            "success": true,
            "refund_id": refund_id,
            "order_id": order_id,
            "product": product_summary(&lines),
            "amount": money(order.amount_cents),
            "status": RefundStatus::Processing.as_str(),
            "estimated_arrival": REFUND_ARRIVAL,
        }))
    }

    /// The knowledge-base articles that best match `query` (at most 3).
    pub(super) fn search_knowledge(&self, query: &str) -> Result<Value, OpError> {
        let conn = self.lock();
        let mut statement = conn.prepare_cached(
            "SELECT article_id, title, category, keywords, content FROM knowledge ORDER BY article_id",
        )?;
        let articles = statement
            .query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, String>(3)?,
                    row.get::<_, String>(4)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        // The articles come in id order, which ranking keeps among ties.
        let results: Vec<Value> = ranked(articles, |(_, title, _, keywords, content)| {
            relevance(query, &format!("{title} {keywords} {content}"), keywords)
        })
        .into_iter()
        .take(3)
        .map(|(id, title, category, _, content)| {
            json!({ "article_id": id, "title": title, "category": category, "content": content })
        })
        .collect();
        let mut answer = json!({ "query": query, "count": results.len() });
        if results.is_empty() {
            answer["hint"] = json!(
                "No article matched. Try other words, e.g. refund, shipping, warranty, cancel, coupon, robot vacuum."
            );
        }
        answer["results"] = Value::Array(results);
        Ok(answer)
    }

    /// The shop's current date and time.
    pub(super) fn current_time(&self) -> Value {
        let now = self.clock().now();
        json!({
            "now": now.to_string(),
            "date": now.date(),
            "weekday": now.weekday(),
            "time_zone": SHOP_TIME_ZONE,
            "utc_offset": SHOP_UTC_OFFSET,
            "iso8601": now.iso8601(),
        })
    }

    /// Cancels an order that has not shipped: a paid order is refunded in
    /// full, its coupon returned and its stock put back.
    pub(super) fn cancel_order(
        &self,
        order_id: &str,
        reason: Option<&str>,
    ) -> Result<Value, OpError> {
        let now = self.clock().now();
        let mut conn = self.lock();
        let tx = write_transaction(&mut conn)?;
        let order = find_order(&tx, order_id)?;
        let refusal = match order.status {
            OrderStatus::PendingPayment | OrderStatus::Paid => None,
            OrderStatus::Shipped => Some(
                "has shipped and can no longer be cancelled; once it is delivered, \
                 the customer can apply for an after-sale return or refund",
            ),
            OrderStatus::Delivered => Some(
                "is delivered; cancelling is only possible before shipping, \
                 so apply for an after-sale return or refund instead",
            ),
            OrderStatus::Cancelled => Some("is already cancelled"),
            OrderStatus::Refunded => Some("is refunded and cannot be cancelled"),
        };
        if let Some(refusal) = refusal {
            return Err(OpError::Rejected(format!("order {order_id} {refusal}")));
        }
        let reason = reason.unwrap_or("cancelled by the customer before shipping");
        tx.execute_cached(
            "UPDATE orders SET status = ?2, cancel_reason = ?3 WHERE order_id = ?1",
            params![order_id, OrderStatus::Cancelled, reason],
        )?;
        tx.execute_cached(
            "UPDATE products SET stock = stock +
                 (SELECT quantity FROM order_items i
                  WHERE i.order_id = ?1 AND i.product_id = products.product_id)
             WHERE product_id IN (SELECT product_id FROM order_items WHERE order_id = ?1)",
            params![order_id],
        )?;
        let coupon_returned = tx.execute_cached(
            "UPDATE coupons SET used_by_order = NULL WHERE used_by_order = ?1",
            params![order_id],
        )? > 0;
        let refund = if order.status == OrderStatus::Paid {
            let reason = format!("order cancelled: {reason}");
            let refund_id = insert_refund(&tx, order_id, &reason, order.amount_cents, now)?;
            Some(json!({
                "refund_id": refund_id,
                "amount": money(order.amount_cents),
                "estimated_arrival": REFUND_ARRIVAL,
            }))
        } else {
            None
        };
        tx.commit()?;
        Ok(json!({
            "success": true,
            "order_id": order_id,
            "status": OrderStatus::Cancelled.as_str(),
            "refund": refund,
            "coupon_returned": order.coupon_id.filter(|_| coupon_returned),
        }))
    }

    /// Changes the delivery address of an order that has not shipped.
    pub(super) fn change_address(&self, order_id: &str, address: &str) -> Result<Value, OpError> {
        let mut conn = self.lock();
        let tx = write_transaction(&mut conn)?;
        let order = find_order(&tx, order_id)?;
        let refusal = match order.status {
            OrderStatus::PendingPayment | OrderStatus::Paid => None,
            OrderStatus::Shipped => {
                Some("has shipped; the address can only be changed before the order ships")
            }
            OrderStatus::Delivered => {
                Some("is delivered already; the address can only be changed before the order ships")
            }
            OrderStatus::Cancelled => {
                Some("is cancelled; nothing will be delivered to any address")
            }
            OrderStatus::Refunded => Some(
                "was delivered and refunded; the address can only be changed before the order ships",
            ),
        };
        if let Some(refusal) = refusal {
            return Err(OpError::Rejected(format!("order {order_id} {refusal}")));
        }
        tx.execute_cached(
            "UPDATE orders SET address = ?2 WHERE order_id = ?1",
            params![order_id, address],
        )?;
        tx.commit()?;
        Ok(json!({
            "success": true,
            "order_id": order_id,
            "address": address,
            "previous_address": order.address,
        }))
    }

    /// Opens an after-sale ticket (refund, return, exchange or repair) on a
    /// delivered order.
    pub(super) fn apply_after_sale(
        &self,
        order_id: &str,
        kind: AfterSaleKind,
        reason: &str,
    ) -> Result<Value, OpError> {
        let now = self.clock().now();
        let mut conn = self.lock();
        let tx = write_transaction(&mut conn)?;
        let order = find_order(&tx, order_id)?;
        if order.status != OrderStatus::Delivered {
            return Err(OpError::Rejected(format!(
                "order {order_id} is {}; after-sale service needs the order to be delivered",
                order.status
            )));
        }
        if let Some((ticket_id, open_kind, status)) = open_after_sale(&tx, order_id)? {
            return Err(OpError::Rejected(format!(
                "order {order_id} already has after-sale ticket {ticket_id} ({open_kind}, {status}) in progress"
            )));
        }
        ensure_not_refunded(&tx, &order, kind)?;
        let ticket_id = DailyId::AfterSale.next(&tx, now)?;
        tx.execute_cached(
            "INSERT INTO after_sales (ticket_id, order_id, kind, reason, status, created_at)
             VALUES (?1, ?2, ?3, ?4, 'pending_review', ?5)",
            params![ticket_id, order_id, kind.as_str(), reason, now.to_string()],
        )?;
        tx.commit()?;
        Ok(json!({
            "success": true,
            "ticket_id": ticket_id,
            "order_id": order_id,
            "type": kind.as_str(),
            "status": "pending_review",
            "next_step": kind.next_step(),
        }))
    }

    /// After-sale tickets by ticket id or by order, newest first.
    pub(super) fn query_after_sale(
        &self,
        order_id: Option<&str>,
        ticket_id: Option<&str>,
    ) -> Result<Value, OpError> {
        let conn = self.lock();
        if let Some(order_id) = order_id {
            find_order(&conn, order_id)?;
        }
        let mut statement = conn.prepare_cached(
            "SELECT a.ticket_id, a.order_id, a.kind, a.reason, a.status, a.created_at
             FROM after_sales a JOIN orders o USING (order_id)
             WHERE o.customer_id = ?1
               AND (?2 IS NULL OR a.order_id = ?2)
               AND (?3 IS NULL OR a.ticket_id = ?3)
             ORDER BY a.created_at DESC",
        )?;
        let tickets = statement
            .query_map(params![DEMO_CUSTOMER, order_id, ticket_id], |row| {
                Ok(json!({
                    "ticket_id": row.get::<_, String>(0)?,
                    "order_id": row.get::<_, String>(1)?,
                    "type": row.get::<_, String>(2)?,
                    "reason": row.get::<_, String>(3)?,
                    "status": row.get::<_, String>(4)?,
                    "created_at": row.get::<_, String>(5)?,
                }))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        if let (Some(ticket_id), true) = (ticket_id, tickets.is_empty()) {
            if let Some(order_id) = order_id
                && let Some(ticket_order) = ticket_order(&conn, ticket_id)?
            {
                return Err(OpError::Rejected(format!(
                    "after-sale ticket {ticket_id} belongs to order {ticket_order}, not to order \
                     {order_id}"
                )));
            }
            return Err(OpError::Rejected(format!(
                "after-sale ticket {ticket_id} not found"
            )));
        }
        Ok(json!({ "count": tickets.len(), "tickets": tickets }))
    }

    /// Catalogue search by product id or by keyword (English or Chinese).
    pub(super) fn search_product(
        &self,
        product_id: Option<&str>,
        keyword: Option<&str>,
    ) -> Result<Value, OpError> {
        let conn = self.lock();
        let mut found = products(&conn)?;
        if let Some(product_id) = product_id {
            found.retain(|product| product.product_id.eq_ignore_ascii_case(product_id));
            if found.is_empty() {
                return Err(OpError::Rejected(format!("product {product_id} not found")));
            }
        }
        if let Some(keyword) = keyword {
            found = ranked(found, |product| {
                let text = format!(
                    "{} {} {} {}",
                    product.product_id, product.name, product.category, product.aliases
                );
                relevance(keyword, &text, &product.aliases)
            });
        }
        Ok(json!({
            "count": found.len(),
            "products": found.iter().map(Product::json).collect::<Vec<_>>(),
        }))
    }

    /// The demo customer's shopping cart.
    pub(super) fn query_cart(&self) -> Result<Value, OpError> {
        Ok(cart_json(&self.lock())?)
    }

    /// Sets the quantity of a product in the cart; 0 removes it.
    pub(super) fn update_cart_item(
        &self,
        product_id: &str,
        quantity: u32,
    ) -> Result<Value, OpError> {
        let mut conn = self.lock();
        let tx = write_transaction(&mut conn)?;
        // Product ids match in any case, as in `search_product`; the cart
        // keeps the catalogue's spelling.
        let (product_id, name, stock): (String, String, i64) = tx
            .query_row_cached(
                "SELECT product_id, name, stock FROM products WHERE product_id = ?1 COLLATE NOCASE",
                params![product_id],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .optional()?
            .ok_or_else(|| OpError::Rejected(format!("product {product_id} not found")))?;
        if quantity == 0 {
            let removed = tx.execute_cached(
                "DELETE FROM cart_items WHERE customer_id = ?1 AND product_id = ?2",
                params![DEMO_CUSTOMER, product_id],
            )?;
            if removed == 0 {
                return Err(OpError::Rejected(format!(
                    "product {product_id} ({name}) is not in the cart, so there is nothing to remove"
                )));
            }
        } else if i64::from(quantity) > stock {
            return Err(OpError::Rejected(format!(
                "only {stock} of product {product_id} in stock"
            )));
        } else {
            tx.execute_cached(
                "INSERT INTO cart_items (customer_id, product_id, quantity) VALUES (?1, ?2, ?3)
                 ON CONFLICT (customer_id, product_id) DO UPDATE SET quantity = excluded.quantity",
                params![DEMO_CUSTOMER, product_id, quantity],
            )?;
        }
        let cart = cart_json(&tx)?;
        tx.commit()?;
        Ok(json!({ "success": true, "cart": cart }))
    }

    /// Turns the cart into an order awaiting payment, optionally with a
    /// coupon; empties the cart and reserves the stock.
    pub(super) fn create_order(&self, coupon_id: Option<&str>) -> Result<Value, OpError> {
        let now = self.clock().now();
        let mut conn = self.lock();
        let tx = write_transaction(&mut conn)?;
        let cart = cart_lines(&tx)?;
        if cart.is_empty() {
            return Err(OpError::Rejected(
                "the cart is empty; add products to the cart first".to_owned(),
            ));
        }
        if let Some((line, stock)) = cart.iter().find(|(line, stock)| line.quantity > *stock) {
            return Err(OpError::Rejected(format!(
                "only {stock} of {} ({}) in stock, the cart holds {}",
                line.name, line.product_id, line.quantity
            )));
        }
        let subtotal: i64 = cart
            .iter()
            .map(|(line, _)| line.unit_price_cents * line.quantity)
            .sum();
        let (coupon_id, discount) = match coupon_id {
            Some(given) => {
                let (coupon_id, discount) = usable_coupon(&tx, given, subtotal, now)?;
                (Some(coupon_id), discount)
            }
            None => (None, 0),
        };
        let amount = (subtotal - discount).max(0);
        let order_id: i64 = tx.query_row_cached(
            "SELECT COALESCE(MAX(CAST(order_id AS INTEGER)), 10000) + 1 FROM orders",
            [],
            |row| row.get(0),
        )?;
        let order_id = order_id.to_string();
        let address = customer_address(&tx)?;
        tx.execute_cached(
            "INSERT INTO orders (order_id, customer_id, amount_cents, status, address, coupon_id, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                order_id,
                DEMO_CUSTOMER,
                amount,
                OrderStatus::PendingPayment,
                address,
                coupon_id,
                now.to_string()
            ],
        )?;
        for (line, _) in &cart {
            tx.execute_cached(
                "INSERT INTO order_items (order_id, product_id, quantity, unit_price_cents)
                 VALUES (?1, ?2, ?3, ?4)",
                params![
                    order_id,
                    line.product_id,
                    line.quantity,
                    line.unit_price_cents
                ],
            )?;
            tx.execute_cached(
                "UPDATE products SET stock = stock - ?2 WHERE product_id = ?1",
                params![line.product_id, line.quantity],
            )?;
        }
        if let Some(coupon_id) = &coupon_id {
            tx.execute_cached(
                "UPDATE coupons SET used_by_order = ?2 WHERE coupon_id = ?1",
                params![coupon_id, order_id],
            )?;
        }
        tx.execute_cached(
            "DELETE FROM cart_items WHERE customer_id = ?1",
            params![DEMO_CUSTOMER],
        )?;
        tx.commit()?;
        Ok(json!({
            "success": true,
            "order_id": order_id,
            "status": OrderStatus::PendingPayment.as_str(),
            "items": cart.into_iter().map(|(line, _)| line.json()).collect::<Vec<_>>(),
            "subtotal": money(subtotal),
            "discount": money(discount),
            "amount": money(amount),
            "coupon_id": coupon_id,
            "address": address,
            "created_at": now.to_string(),
        }))
    }

    /// Pays an order that awaits payment.
    pub(super) fn pay_order(
        &self,
        order_id: &str,
        method: PaymentMethod,
    ) -> Result<Value, OpError> {
        let mut conn = self.lock();
        let tx = write_transaction(&mut conn)?;
        let order = find_order(&tx, order_id)?;
        if order.status != OrderStatus::PendingPayment {
            return Err(OpError::Rejected(format!(
                "order {order_id} is {}; only an order awaiting payment (pending_payment) can be paid",
                order.status
            )));
        }
        tx.execute_cached(
            "UPDATE orders SET status = ?2, payment_method = ?3 WHERE order_id = ?1",
            params![order_id, OrderStatus::Paid, method.as_str()],
        )?;
        tx.commit()?;
        Ok(json!({
            "success": true,
            "order_id": order_id,
            "status": OrderStatus::Paid.as_str(),
            "amount": money(order.amount_cents),
            "method": method.as_str(),
        }))
    }

    /// The demo customer's coupons, each `available`, `used` or `expired`.
    pub(super) fn query_coupons(&self) -> Result<Value, OpError> {
        let today = self.clock().now().date();
        let conn = self.lock();
        let mut statement = conn.prepare_cached(
            "SELECT coupon_id, title, discount_cents, min_spend_cents, expires_on, used_by_order
             FROM coupons WHERE customer_id = ?1 ORDER BY coupon_id",
        )?;
        let coupons = statement
            .query_map(params![DEMO_CUSTOMER], |row| {
                let expires_on: String = row.get(4)?;
                let used_by_order: Option<String> = row.get(5)?;
                let status = match &used_by_order {
                    Some(_) => "used",
                    None if expires_on < today => "expired",
                    None => "available",
                };
                Ok(json!({
                    "coupon_id": row.get::<_, String>(0)?,
                    "title": row.get::<_, String>(1)?,
                    "discount": money(row.get(2)?),
                    "min_spend": money(row.get(3)?),
                    "expires_on": expires_on,
                    "status": status,
                    "used_by_order": used_by_order,
                }))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(json!({ "count": coupons.len(), "coupons": coupons }))
    }

    /// The demo customer's membership: level, points, default address.
    pub(super) fn query_member(&self) -> Result<Value, OpError> {
        let conn = self.lock();
        Ok(conn.query_row_cached(
            "SELECT customer_id, name, level, points, phone, default_address
             FROM customers WHERE customer_id = ?1",
            params![DEMO_CUSTOMER],
            |row| {
                Ok(json!({
                    "customer_id": row.get::<_, String>(0)?,
                    "name": row.get::<_, String>(1)?,
                    "level": row.get::<_, String>(2)?,
                    "points": row.get::<_, i64>(3)?,
                    "phone": row.get::<_, String>(4)?,
                    "default_address": row.get::<_, String>(5)?,
                }))
            },
        )?)
    }

    /// Opens a support ticket for a person to follow up.
    pub(super) fn submit_ticket(
        &self,
        subject: &str,
        description: &str,
        order_id: Option<&str>,
    ) -> Result<Value, OpError> {
        let now = self.clock().now();
        let mut conn = self.lock();
        let tx = write_transaction(&mut conn)?;
        if let Some(order_id) = order_id {
            find_order(&tx, order_id)?;
        }
        let ticket_id = DailyId::SupportTicket.next(&tx, now)?;
        tx.execute_cached(
            "INSERT INTO support_tickets
                 (ticket_id, customer_id, order_id, subject, description, status, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 'open', ?6)",
            params![
                ticket_id,
                DEMO_CUSTOMER,
                order_id,
                subject,
                description,
                now.to_string()
            ],
        )?;
        tx.commit()?;
        Ok(json!({
            "success": true,
            "ticket_id": ticket_id,
            "order_id": order_id,
            "status": "open",
            "expected_response": "within 24 hours",
        }))
    }

    /// The demo customer's connected devices.
    pub(super) fn list_devices(&self) -> Result<Value, OpError> {
        let found = devices(&self.lock())?;
        Ok(json!({
            "count": found.len(),
            "devices": found.iter().map(Device::json).collect::<Vec<_>>(),
        }))
    }

    /// Troubleshooting for a symptom of one of the customer's devices (or of
    /// a product by name): what the device reports, likely causes, steps.
    pub(super) fn diagnose_device(&self, device: &str, symptom: &str) -> Result<Value, OpError> {
        let conn = self.lock();
        let owned = devices(&conn)?;
        let names: Vec<String> = owned
            .iter()
            .map(|d| format!("{} ({})", d.device_id, d.nickname))
            .collect();
        let found = best_match(owned, |d| {
            if d.device_id.eq_ignore_ascii_case(device) {
                return usize::MAX;
            }
            let text = format!("{} {} {}", d.nickname, d.product.name, d.product.aliases);
            relevance(device, &text, &d.product.aliases)
        });
        let (target, product, mut findings) = match found {
            Some(found) => {
                let mut findings = Vec::new();
                if !found.online {
                    findings.push(format!("{} is offline in the Bit Home app", found.nickname));
                }
                if let Some(error) = &found.error {
                    findings.push(format!("{} reports error {error}", found.nickname));
                }
                (found.json(), found.product, findings)
            }
            None => {
                let product = best_match(products(&conn)?, |p| {
                    if p.product_id.eq_ignore_ascii_case(device) {
                        return usize::MAX;
                    }
                    let text = format!("{} {} {}", p.name, p.category, p.aliases);
                    relevance(device, &text, &p.aliases)
                })
                .ok_or_else(|| {
                    OpError::Rejected(format!(
                        "no device or product matches `{device}`; the customer's devices are: {}",
                        names.join(", ")
                    ))
                })?;
                (product.json(), product, Vec::new())
            }
        };
        let mut statement = conn
            .prepare_cached("SELECT keywords, cause, steps FROM diagnostics WHERE category = ?1")?;
        let rules = statement
            .query_map(params![product.category], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let causes: Vec<Value> = ranked(rules, |(keywords, ..)| {
            relevance(symptom, keywords, keywords)
        })
        .into_iter()
        .take(2)
        .map(|(_, cause, steps)| {
            json!({ "cause": cause, "steps": steps.split('|').collect::<Vec<_>>() })
        })
        .collect();
        if causes.is_empty() {
            findings.push(format!(
                "no troubleshooting rule for {} matches the symptom",
                product.name
            ));
        }
        Ok(json!({
            "target": target,
            "symptom": symptom,
            "findings": findings,
            "likely_causes": causes,
            "next_step": "If the steps do not help: a delivered order under warranty can get an \
                          after-sale repair; otherwise open a support ticket.",
        }))
    }
}

/// The coupon `given` names (its id, whatever the case) and its discount,
/// when the customer may use it on `subtotal` now.
fn usable_coupon(
    conn: &Connection,
    given: &str,
    subtotal: i64,
    now: ShopTime,
) -> Result<(String, i64), OpError> {
    // Coupon codes are read out and typed by people: `c001` is C001.
    let (coupon_id, discount, min_spend, expires_on, used_by_order): (
        String,
        i64,
        i64,
        String,
        Option<String>,
    ) = conn
        .query_row_cached(
            "SELECT coupon_id, discount_cents, min_spend_cents, expires_on, used_by_order
             FROM coupons WHERE coupon_id = ?1 COLLATE NOCASE AND customer_id = ?2",
            params![given.trim(), DEMO_CUSTOMER],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            },
        )
        .optional()?
        .ok_or_else(|| OpError::Rejected(format!("coupon {given} not found")))?;
    if let Some(order_id) = used_by_order {
        return Err(OpError::Rejected(format!(
            "coupon {coupon_id} was already used on order {order_id}"
        )));
    }
    if expires_on < now.date() {
        return Err(OpError::Rejected(format!(
            "coupon {coupon_id} expired on {expires_on}"
        )));
    }
    if subtotal < min_spend {
        return Err(OpError::Rejected(format!(
            "coupon {coupon_id} needs a minimum spend of {}; the cart totals {}",
            money_text(min_spend),
            money_text(subtotal)
        )));
    }
    Ok((coupon_id, discount))
}

/// Why an order in `status` (not delivered) cannot be refunded, and what
/// the shop's policy (knowledge article KB001) offers instead.
fn not_refundable(order_id: &str, status: OrderStatus) -> String {
    match status {
        OrderStatus::PendingPayment => format!(
            "order {order_id} has not been paid; there is nothing to refund (an unpaid order can \
             be cancelled)"
        ),
        OrderStatus::Paid => format!(
            "order {order_id} is paid and not shipped yet; it is cancelled instead of refunded, \
             and the payment goes back automatically"
        ),
        OrderStatus::Cancelled => format!(
            "order {order_id} is cancelled; a payment it had went back when it was cancelled, so \
             there is nothing to refund"
        ),
        other => format!("order {order_id} is {other}; a refund needs the order to be delivered"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Condvar, Mutex};
    use std::time::Duration;

    use rusqlite::StatementStatus;

    use super::*;

    /// Whether the shop's connection has waited for another's write lock.
    static WAITED: Mutex<bool> = Mutex::new(false);
    static WAIT_SEEN: Condvar = Condvar::new();

    /// A busy handler that tells the test each time the shop waits, then
    /// waits on.
    fn note_the_wait(_retries: i32) -> bool {
        *WAITED.lock().unwrap() = true;
        WAIT_SEEN.notify_all();
        std::thread::sleep(Duration::from_millis(1));
        true
    }

    /// Runs `operation` on a new shop file in `dir` while another process
    /// holds its write lock with `change` made, and commits the change once
    /// the shop waits for the lock: an operation that checked before it
    /// waited acts on what it read before the change. Returns the
    /// operation's outcome and the other process's connection, to read what
    /// was written.
    fn with_another_writer(
        dir: &tempfile::TempDir,
        change: &str,
        operation: impl FnOnce(&DemoDb) -> Result<Value, OpError> + Send,
    ) -> (Result<Value, OpError>, Connection) {
        let path = dir.path().join("shop.sqlite");
        let db = DemoDb::open(&path).unwrap();
        db.lock().busy_handler(Some(note_the_wait)).unwrap();
        let other_process = Connection::open(&path).unwrap();
        other_process
            .execute_batch(&format!("BEGIN IMMEDIATE; {change}"))
            .unwrap();
        *WAITED.lock().unwrap() = false;
        let outcome = std::thread::scope(|scope| {
            let operation = scope.spawn(|| operation(&db));
            let waited = *WAIT_SEEN
                .wait_timeout_while(WAITED.lock().unwrap(), Duration::from_secs(60), |waited| {
                    !*waited
                })
                .unwrap()
                .0;
            // Committed before any assertion, so that the operation ends.
            other_process.execute_batch("COMMIT").unwrap();
            let outcome = operation.join().unwrap();
            assert!(waited, "the operation never waited for the write lock");
            outcome
        });
        (outcome, other_process)
    }

    /// `pay_order`, `change_address` and `update_cart_item` read what they
    /// check in the transaction of their write, so another process's
    /// cancel, shipment or sale cannot come in between.
    #[test]
    fn a_check_and_its_write_let_no_other_writer_in_between() {
        let dir = tempfile::tempdir().unwrap();
        let (paid, other) = with_another_writer(
            &dir,
            "UPDATE orders SET status = 'cancelled' WHERE order_id = '88240'",
            |db| db.pay_order("88240", PaymentMethod::Alipay),
        );
        assert!(matches!(paid, Err(OpError::Rejected(_))), "{paid:?}");
        let (status, method): (String, Option<String>) = other
            .query_row(
                "SELECT status, payment_method FROM orders WHERE order_id = '88240'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        assert_eq!((status.as_str(), method), ("cancelled", None));

        let dir = tempfile::tempdir().unwrap();
        let (redirected, other) = with_another_writer(
            &dir,
            "UPDATE orders SET status = 'shipped', tracking_no = 'SF5550001111' \
             WHERE order_id = '88239'",
            |db| db.change_address("88239", "1 Other Road, Guangzhou"),
        );
        assert!(
            matches!(redirected, Err(OpError::Rejected(_))),
            "{redirected:?}"
        );
        let address: String = other
            .query_row(
                "SELECT address FROM orders WHERE order_id = '88239'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert!(address.starts_with("Room 1203"), "{address}");

        let dir = tempfile::tempdir().unwrap();
        let (added, other) = with_another_writer(
            &dir,
            "UPDATE products SET stock = 1 WHERE product_id = 'P1005'",
            |db| db.update_cart_item("P1005", 5),
        );
        assert!(matches!(added, Err(OpError::Rejected(_))), "{added:?}");
        let in_cart: i64 = other
            .query_row(
                "SELECT count(*) FROM cart_items WHERE product_id = 'P1005'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(in_cart, 0);
    }

    /// The read tools' statements stay prepared: run again with other
    /// arguments, SQLite neither parses nor plans them again (see the query
    /// planner stability guarantee in `DemoDb::init`).
    #[test]
    fn hot_read_statements_are_not_re_prepared() {
        let db = DemoDb::in_memory().unwrap();
        let lookups = [
            ("88231", "SF1234567890"),
            ("99001", "YT9876543210"),
            ("55008", "SF1122334455"),
        ];
        for _ in 0..2 {
            for (order_id, tracking_no) in lookups {
                db.query_order(order_id).unwrap();
                db.query_logistics(tracking_no).unwrap();
            }
        }
        let runs = 2 * lookups.len() as i32;
        let conn = db.lock();
        for sql in [
            FIND_ORDER,
            ORDER_LINES,
            REFUNDS_OF_ORDER,
            LOGISTICS,
            LOGISTICS_EVENTS,
        ] {
            let statement = conn.prepare_cached(sql).unwrap();
            // The statement the lookups ran, taken from the cache.
            assert_eq!(
                statement.get_status(StatementStatus::Run),
                runs,
                "{}",
                sql.trim()
            );
            assert_eq!(
                statement.get_status(StatementStatus::RePrepare),
                0,
                "re-prepared: {}",
                sql.trim()
            );
        }
    }

    /// Writes go through the statement cache too: two tools writing a
    /// refund run one prepared statement.
    #[test]
    fn write_statements_stay_prepared() {
        let db = DemoDb::in_memory().unwrap();
        db.apply_refund("88231", "broken").unwrap();
        db.cancel_order("88239", None).unwrap();
        let conn = db.lock();
        let statement = conn.prepare_cached(INSERT_REFUND).unwrap();
        assert_eq!(statement.get_status(StatementStatus::Run), 2);
        assert_eq!(statement.get_status(StatementStatus::RePrepare), 0);
    }

    /// Of several refunds of an order (the tools record at most one), the
    /// order shows the latest: by creation time, then by refund id.
    #[test]
    fn an_order_shows_its_latest_refund() {
        let db = DemoDb::in_memory().unwrap();
        db.lock()
            .execute_batch(
                "INSERT INTO refunds VALUES
                     ('RF20260620002', '88231', 'x', 100, 'completed', '2026-06-20 09:00:00'),
                     ('RF20260621001', '88231', 'x', 100, 'processing', '2026-06-21 08:00:00'),
                     ('RF20260621002', '88231', 'x', 100, 'completed', '2026-06-21 08:00:00'),
                     ('RF20260620001', '88231', 'x', 100, 'processing', '2026-06-20 10:00:00');",
            )
            .unwrap();
        let order = db.query_order("88231").unwrap();
        assert_eq!(
            order["refund"],
            json!({"refund_id": "RF20260621002", "status": "completed"})
        );
        let order = db.query_order("99001").unwrap();
        assert_eq!(order["refund"], Value::Null);
    }
}
