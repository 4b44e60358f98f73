//! The demo operations as [`Tool`]s. One table-driven implementation serves
//! both articles: an [`Operation`] says what runs, a [`Dialect`] how it is
//! named (`queryOrder {orderId}` in article 003, `query_order {order_id}` in
//! article 000), so the twins share their schema, rules and answers.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::db::DemoDb;
use super::shop::{AfterSaleKind, PaymentMethod};
use crate::blocking::off_executor;
use crate::tools::{Access, Tool, ToolContext, ToolError, ToolSpec};

/// The naming convention of one article's tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    /// Article 003 (TinyAgent): camelCase tool names, arguments and answers.
    Article003,
    /// Article 000 (Ragent): snake_case throughout.
    Article000,
}

impl Dialect {
    /// `snake` (a tool, argument or answer key) as this dialect spells it.
    fn ident(self, snake: &str) -> String {
        match self {
            Self::Article000 => snake.to_owned(),
            Self::Article003 => {
                let mut camel = String::with_capacity(snake.len());
                let mut upper = false;
                for c in snake.chars() {
                    if c == '_' {
                        upper = true;
                    } else if upper {
                        camel.extend(c.to_uppercase());
                        upper = false;
                    } else {
                        camel.push(c);
                    }
                }
                camel
            }
        }
    }

    /// Arguments with snake_case keys (they are flat objects).
    fn input(self, arguments: Value) -> Value {
        match (self, arguments) {
            (Self::Article003, Value::Object(map)) => Value::Object(
                map.into_iter()
                    .map(|(key, value)| (snake_case(&key), value))
                    .collect(),
            ),
            (_, arguments) => arguments,
        }
    }

    /// An answer with every object key in this dialect's spelling.
    fn output(self, mut answer: Value) -> Value {
        if self == Self::Article003 {
            camel_case_keys(&mut answer);
        }
        answer
    }
}

/// Renames every object key in `value` to camelCase, in place. Only maps
/// with a snake_case key are rebuilt, and keys without `_` are kept as they
/// are (e.g. each `{time, description}` of a shipment's events).
fn camel_case_keys(value: &mut Value) {
    match value {
        Value::Object(map) if map.keys().any(|key| key.contains('_')) => {
            *map = std::mem::take(map)
                .into_iter()
                .map(|(key, mut value)| {
                    camel_case_keys(&mut value);
                    let key = if key.contains('_') {
                        Dialect::Article003.ident(&key)
                    } else {
                        key
                    };
                    (key, value)
                })
                .collect();
        }
        Value::Object(map) => map.values_mut().for_each(camel_case_keys),
        Value::Array(items) => items.iter_mut().for_each(camel_case_keys),
        _ => {}
    }
}

fn snake_case(camel: &str) -> String {
    let mut snake = String::with_capacity(camel.len() + 4);
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            snake.push('_');
            snake.push(c.to_ascii_lowercase());
        } else {
            snake.push(c);
        }
    }
    snake
}

/// Everything the demo shop can do; each becomes a tool in one or both
/// dialects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Operation {
    QueryOrder,
    QueryLogistics,
    ApplyRefund,
    SearchKnowledge,
    GetCurrentTime,
    CancelOrder,
    ChangeAddress,
    ApplyAfterSale,
    QueryAfterSale,
    SearchProduct,
    QueryCart,
    UpdateCartItem,
    CreateOrder,
    PayOrder,
    QueryCoupons,
    QueryMember,
    SubmitTicket,
    DiagnoseDevice,
    ListDevices,
}

/// One argument: its snake_case name, schema, and whether it is required.
struct Param {
    name: &'static str,
    schema: Value,
    required: bool,
}

fn text(required: bool, name: &'static str, description: &str, max_length: u32) -> Param {
    Param {
        name,
        schema: json!({
            "type": "string",
            "minLength": 1,
            "maxLength": max_length,
            "description": description,
        }),
        required,
    }
}

fn order_id(required: bool, description: &str) -> Param {
    text(required, "order_id", description, 32)
}

impl Operation {
    fn snake_name(self) -> &'static str {
        match self {
            Self::QueryOrder => "query_order",
            Self::QueryLogistics => "query_logistics",
            Self::ApplyRefund => "apply_refund",
            Self::SearchKnowledge => "search_knowledge",
            Self::GetCurrentTime => "get_current_time",
            Self::CancelOrder => "cancel_order",
            Self::ChangeAddress => "change_address",
            Self::ApplyAfterSale => "apply_after_sale",
            Self::QueryAfterSale => "query_after_sale",
            Self::SearchProduct => "search_product",
            Self::QueryCart => "query_cart",
            Self::UpdateCartItem => "update_cart_item",
            Self::CreateOrder => "create_order",
            Self::PayOrder => "pay_order",
            Self::QueryCoupons => "query_coupons",
            Self::QueryMember => "query_member",
            Self::SubmitTicket => "submit_ticket",
            Self::DiagnoseDevice => "diagnose_device",
            Self::ListDevices => "list_devices",
        }
    }

    fn access(self) -> Access {
        match self {
            Self::ApplyRefund
            | Self::CancelOrder
            | Self::ChangeAddress
            | Self::ApplyAfterSale
            | Self::UpdateCartItem
            | Self::CreateOrder
            | Self::PayOrder
            | Self::SubmitTicket => Access::Write,
            Self::QueryOrder
            | Self::QueryLogistics
            | Self::SearchKnowledge
            | Self::GetCurrentTime
            | Self::QueryAfterSale
            | Self::SearchProduct
            | Self::QueryCart
            | Self::QueryCoupons
            | Self::QueryMember
            | Self::DiagnoseDevice
            | Self::ListDevices => Access::Read,
        }
    }

    /// The description for the model, the arguments, and whether at least
    /// one (optional) argument must be given.
    fn contract(self, dialect: Dialect) -> (String, Vec<Param>, bool) {
        let key = |snake: &str| dialect.ident(snake);
        let order_number = "The order number, e.g. \"88231\".";
        match self {
            Self::QueryOrder => {
                // Article 000's session lists the customer's orders ("five
                // orders") when the customer gave no order number.
                let lists = dialect == Dialect::Article000;
                let listing = if lists {
                    format!(
                        " Omit `{}` to list all of the customer's orders, newest first, when they \
                         did not say which order.",
                        key("order_id")
                    )
                } else {
                    String::new()
                };
                let description = format!(
                    "Look up one of the customer's orders by order number: products, amount (CNY), \
                     status, tracking number (null until shipped), delivery address, creation time \
                     and refund, if any. Status is one of pending_payment, paid, shipped, delivered, \
                     cancelled, refunded.{listing} Read-only."
                );
                (description, vec![order_id(!lists, order_number)], false)
            }
            Self::QueryLogistics => (
                format!(
                    "Track a shipment by its tracking number (the order's `{}`): carrier, status \
                     (in_transit, out_for_delivery, delivered), who signed for it, and the dated \
                     events. Read-only.",
                    key("tracking_no")
                ),
                vec![text(
                    true,
                    "tracking_no",
                    "The tracking number, e.g. \"SF1234567890\".",
                    32,
                )],
                false,
            ),
            Self::ApplyRefund => (
                "Submit a full refund of an order to the original payment method. Only a delivered \
                 (signed-for) order can be refunded, only once, and not while an after-sale request \
                 on it is in progress; otherwise the call is rejected with the reason to tell the \
                 customer. Returns the refund id and when the money \
                 arrives. Changes data."
                    .to_owned(),
                vec![
                    order_id(true, order_number),
                    text(
                        true,
                        "reason",
                        "Why the customer wants the refund, in their words, e.g. \"the vacuum stopped working\".",
                        500,
                    ),
                ],
                false,
            ),
            Self::SearchKnowledge => (
                "Search the shop's knowledge base: refund and return policy, shipping times, \
                 warranty, cancelling orders and changing addresses, coupons and membership, \
                 troubleshooting robot vacuums and earbuds. Returns up to 3 articles. Use it for \
                 policy and how-to questions, not to look up a particular order. Read-only."
                    .to_owned(),
                vec![text(
                    true,
                    "query",
                    "Keywords or a question, in English or Chinese, e.g. \"refund policy\" or \"扫地机不吸灰\".",
                    200,
                )],
                false,
            ),
            Self::GetCurrentTime => (
                "The shop's current date, time and weekday (Asia/Shanghai, UTC+08:00). Use it to \
                 reason about dates, e.g. whether an order is still within the 7-day return window. \
                 Read-only."
                    .to_owned(),
                Vec::new(),
                false,
            ),
            Self::CancelOrder => (
                "Cancel an order that has not shipped yet (status pending_payment or paid). A paid \
                 order is refunded in full to the original payment method and a coupon it used is \
                 returned. A shipped or delivered order cannot be cancelled: the call is rejected \
                 with the reason. Changes data."
                    .to_owned(),
                vec![
                    order_id(true, order_number),
                    text(
                        false,
                        "reason",
                        "The customer's reason, e.g. \"changed my mind\".",
                        500,
                    ),
                ],
                false,
            ),
            Self::ChangeAddress => (
                "Change the delivery address of an order that has not shipped yet (status \
                 pending_payment or paid); rejected once it has shipped. Returns the new and the \
                 previous address. Changes data."
                    .to_owned(),
                vec![
                    order_id(true, order_number),
                    text(
                        true,
                        "address",
                        "The complete new address: room, building, street, district, city, province.",
                        300,
                    ),
                ],
                false,
            ),
            Self::ApplyAfterSale => (
                "Open an after-sale request on a delivered order: a refund, a return (send the item \
                 back for a refund), an exchange or a repair. Rejected when the order is not \
                 delivered, already has a request in progress, or was refunded (a refunded order \
                 gets no second refund, no return, exchange or repair). Returns the ticket id and the next step. Changes data."
                    .to_owned(),
                vec![
                    order_id(true, order_number),
                    Param {
                        name: "type",
                        schema: json!({
                            "type": "string",
                            "enum": ["refund", "return", "exchange", "repair"],
                            "description": "refund: money back, keep the item; return: send it back \
                                for a refund; exchange: send it back for a new one; repair: fix it \
                                under warranty.",
                        }),
                        required: true,
                    },
                    text(
                        true,
                        "reason",
                        "What is wrong, in the customer's words.",
                        500,
                    ),
                ],
                false,
            ),
            Self::QueryAfterSale => (
                format!(
                    "Look up after-sale requests by ticket id or by order number: type, reason, \
                     status (pending_review, approved, completed, rejected) and date. Give `{}` or \
                     `{}`. Read-only.",
                    key("ticket_id"),
                    key("order_id")
                ),
                vec![
                    order_id(false, order_number),
                    text(
                        false,
                        "ticket_id",
                        "The after-sale ticket id, e.g. \"AS20260612001\".",
                        32,
                    ),
                ],
                true,
            ),
            Self::SearchProduct => (
                format!(
                    "Find products in the catalogue by product id or by keyword (name or category, in \
                     English or Chinese), with price and stock. Give `{}` or `{}`. Read-only.",
                    key("product_id"),
                    key("keyword")
                ),
                vec![
                    text(false, "product_id", "The product id, e.g. \"P1001\".", 32),
                    text(
                        false,
                        "keyword",
                        "Words to search for, e.g. \"robot vacuum\" or \"耳机\".",
                        100,
                    ),
                ],
                true,
            ),
            Self::QueryCart => (
                "Show the customer's shopping cart: products, quantities, prices and the total. \
                 Read-only."
                    .to_owned(),
                Vec::new(),
                false,
            ),
            Self::UpdateCartItem => (
                "Set how many of a product are in the customer's cart; 0 removes it. Rejected for an \
                 unknown product, more than the stock, or 0 of a product not in the cart. Returns \
                 the updated cart. Changes data."
                    .to_owned(),
                vec![
                    text(true, "product_id", "The product id, e.g. \"P1007\".", 32),
                    Param {
                        name: "quantity",
                        schema: json!({
                            "type": "integer",
                            "minimum": 0,
                            "maximum": 99,
                            "description": "The new quantity; 0 removes the product from the cart.",
                        }),
                        required: true,
                    },
                ],
                false,
            ),
            Self::CreateOrder => (
                format!(
                    "Place an order for everything in the customer's cart, optionally with one \
                     coupon. The order awaits payment and the cart is emptied. Rejected when the cart \
                     is empty, stock is short or the coupon cannot be used (unknown, used, expired, \
                     minimum spend not reached). Changes data. Check `{}` with the customer first.",
                    dialect.ident("query_cart")
                ),
                vec![text(
                    false,
                    "coupon_id",
                    "A coupon of the customer to apply, e.g. \"C001\".",
                    32,
                )],
                false,
            ),
            Self::PayOrder => (
                "Pay an order that awaits payment (status pending_payment) with the chosen method; \
                 rejected for any other status. Charges the customer. Changes data."
                    .to_owned(),
                vec![
                    order_id(true, order_number),
                    Param {
                        name: "method",
                        schema: json!({
                            "type": "string",
                            "enum": ["alipay", "wechat_pay", "card"],
                            "description": "How the customer pays.",
                        }),
                        required: true,
                    },
                ],
                false,
            ),
            Self::QueryCoupons => (
                "List the customer's coupons: discount, minimum spend, expiry date and status \
                 (available, used, expired). Read-only."
                    .to_owned(),
                Vec::new(),
                false,
            ),
            Self::QueryMember => (
                "The customer's membership: name, level, points, masked phone number and default \
                 delivery address. Read-only."
                    .to_owned(),
                Vec::new(),
                false,
            ),
            Self::SubmitTicket => (
                "Open a support ticket for a person to follow up within 24 hours, for problems the \
                 other tools cannot solve (complaints, faults that remain after troubleshooting). \
                 Changes data."
                    .to_owned(),
                vec![
                    text(true, "subject", "A one-line summary.", 120),
                    text(
                        true,
                        "description",
                        "What happened and what the customer wants.",
                        2000,
                    ),
                    order_id(false, "The order it is about, if any, e.g. \"88231\"."),
                ],
                false,
            ),
            Self::DiagnoseDevice => (
                format!(
                    "Troubleshoot one of the customer's devices for a symptom: what the device itself \
                     reports (online state, error code) and the likely causes with steps to try. \
                     Name the device by its id from `{}`, its nickname, or the product name (e.g. \
                     \"S10 Pro\"). Read-only.",
                    dialect.ident("list_devices")
                ),
                vec![
                    text(
                        true,
                        "device",
                        "Device id, nickname or product name, e.g. \"D-S10-7781\" or \"robot vacuum\".",
                        100,
                    ),
                    text(
                        true,
                        "symptom",
                        "What goes wrong, in the customer's words, e.g. \"does not pick up dust\".",
                        500,
                    ),
                ],
                false,
            ),
            Self::ListDevices => (
                "List the customer's smart devices bound in the Bit Home app: id, nickname, product, \
                 online state, firmware and any error they report. Read-only."
                    .to_owned(),
                Vec::new(),
                false,
            ),
        }
    }

    fn spec(self, dialect: Dialect) -> ToolSpec {
        let (description, params, at_least_one) = self.contract(dialect);
        let mut properties = Map::new();
        let mut required = Vec::new();
        for param in params {
            let name = dialect.ident(param.name);
            if param.required {
                required.push(Value::String(name.clone()));
            }
            properties.insert(name, param.schema);
        }
        let mut parameters = json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        });
        if at_least_one {
            parameters["minProperties"] = json!(1);
        }
        ToolSpec {
            name: dialect.ident(self.snake_name()),
            description,
            parameters,
            access: self.access(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OrderArgs {
    order_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TrackingArgs {
    tracking_no: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RefundArgs {
    order_id: String,
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasonArgs {
    order_id: String,
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryArgs {
    query: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddressArgs {
    order_id: String,
    address: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AfterSaleArgs {
    order_id: String,
    #[serde(rename = "type")]
    kind: AfterSaleKind,
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AfterSaleLookupArgs {
    order_id: Option<String>,
    ticket_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProductLookupArgs {
    product_id: Option<String>,
    keyword: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CartItemArgs {
    product_id: String,
    quantity: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateOrderArgs {
    coupon_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PayArgs {
    order_id: String,
    method: PaymentMethod,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TicketArgs {
    subject: String,
    description: String,
    order_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DiagnoseArgs {
    device: String,
    symptom: String,
}

/// One demo operation in one dialect.
pub(super) struct DemoTool {
    spec: ToolSpec,
    operation: Operation,
    dialect: Dialect,
    db: Arc<DemoDb>,
}

/// Typed arguments of the tool named `tool`. The registry has validated them
/// against the schema, so a failure here means schema and type disagree.
fn parse<T: DeserializeOwned>(tool: &str, arguments: Value) -> Result<T, ToolError> {
    serde_json::from_value(arguments).map_err(|error| ToolError::InvalidArguments {
        tool: tool.to_owned(),
        message: error.to_string(),
    })
}

/// Turns whole numbers written as floats (`2.0`) into integers where the
/// schema asks for an integer: JSON Schema counts `2.0` as one, so the
/// registry passes it, and serde's integer types would then refuse it.
fn whole_floats_as_integers(parameters: &Value, arguments: &mut Value) {
    let (Some(properties), Value::Object(arguments)) =
        (parameters["properties"].as_object(), arguments)
    else {
        return;
    };
    for (name, schema) in properties {
        if schema["type"] != "integer" {
            continue;
        }
        if let Some(value) = arguments.get_mut(name)
            && value.is_f64()
            && let Some(float) = value.as_f64()
            && float.fract() == 0.0
            // i64::MAX as f64 is 2^63, one past the largest i64.
            && (i64::MIN as f64..i64::MAX as f64).contains(&float)
        {
            *value = Value::from(float as i64);
        }
    }
}

impl DemoTool {
    pub(super) fn new(operation: Operation, dialect: Dialect, db: Arc<DemoDb>) -> Self {
        Self {
            spec: operation.spec(dialect),
            operation,
            dialect,
            db,
        }
    }

    /// Runs `operation` as the tool named `tool` on snake_case arguments;
    /// answers in snake_case.
    fn run(
        operation: Operation,
        tool: &str,
        db: &DemoDb,
        arguments: Value,
    ) -> Result<Value, ToolError> {
        let answer = match operation {
            Operation::QueryOrder => match parse::<OrderArgs>(tool, arguments)?.order_id {
                Some(order_id) => db.query_order(&order_id),
                None => db.list_orders(),
            },
            Operation::QueryLogistics => {
                db.query_logistics(&parse::<TrackingArgs>(tool, arguments)?.tracking_no)
            }
            Operation::ApplyRefund => {
                let args: RefundArgs = parse(tool, arguments)?;
                db.apply_refund(&args.order_id, &args.reason)
            }
            Operation::SearchKnowledge => {
                db.search_knowledge(&parse::<QueryArgs>(tool, arguments)?.query)
            }
            Operation::GetCurrentTime => Ok(db.current_time()),
            Operation::CancelOrder => {
                let args: ReasonArgs = parse(tool, arguments)?;
                db.cancel_order(&args.order_id, args.reason.as_deref())
            }
            Operation::ChangeAddress => {
                let args: AddressArgs = parse(tool, arguments)?;
                db.change_address(&args.order_id, &args.address)
            }
            Operation::ApplyAfterSale => {
                let args: AfterSaleArgs = parse(tool, arguments)?;
                db.apply_after_sale(&args.order_id, args.kind, &args.reason)
            }
            Operation::QueryAfterSale => {
                let args: AfterSaleLookupArgs = parse(tool, arguments)?;
                db.query_after_sale(args.order_id.as_deref(), args.ticket_id.as_deref())
            }
            Operation::SearchProduct => {
                let args: ProductLookupArgs = parse(tool, arguments)?;
                db.search_product(args.product_id.as_deref(), args.keyword.as_deref())
            }
            Operation::QueryCart => db.query_cart(),
            Operation::UpdateCartItem => {
                let args: CartItemArgs = parse(tool, arguments)?;
                db.update_cart_item(&args.product_id, args.quantity)
            }
            Operation::CreateOrder => db.create_order(
                parse::<CreateOrderArgs>(tool, arguments)?
                    .coupon_id
                    .as_deref(),
            ),
            Operation::PayOrder => {
                let args: PayArgs = parse(tool, arguments)?;
                db.pay_order(&args.order_id, args.method)
            }
            Operation::QueryCoupons => db.query_coupons(),
            Operation::QueryMember => db.query_member(),
            Operation::SubmitTicket => {
                let args: TicketArgs = parse(tool, arguments)?;
                db.submit_ticket(&args.subject, &args.description, args.order_id.as_deref())
            }
            Operation::DiagnoseDevice => {
                let args: DiagnoseArgs = parse(tool, arguments)?;
                db.diagnose_device(&args.device, &args.symptom)
            }
            Operation::ListDevices => db.list_devices(),
        };
        Ok(answer?)
    }
}

#[async_trait]
impl Tool for DemoTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn invoke(
        &self,
        _context: &ToolContext,
        mut arguments: Value,
    ) -> Result<Value, ToolError> {
        whole_floats_as_integers(&self.spec.parameters, &mut arguments);
        let arguments = self.dialect.input(arguments);
        let answer = if self.db.in_file() {
            // Syncing the file or waiting for another process's write lock
            // must not hold up the async worker's other tasks.
            let (operation, tool, db) = (self.operation, self.spec.name.clone(), self.db.clone());
            off_executor(move || Self::run(operation, &tool, &db, arguments))
                .await
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?
        } else {
            Self::run(self.operation, &self.spec.name, &self.db, arguments)?
        };
        Ok(self.dialect.output(answer))
    }
}
