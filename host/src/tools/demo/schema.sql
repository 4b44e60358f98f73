-- Schema of the "Bit Select" demo shop (version 2, kept in PRAGMA user_version).
-- Money is stored in cents (CNY fen); times are shop-local (UTC+08:00) as
-- "YYYY-MM-DD HH:MM:SS", dates as "YYYY-MM-DD", so text order is time order.
-- Plain CREATE TABLE, not IF NOT EXISTS: a foreign database that happens to
-- hold a table of the same name is an error, never a silent mix.

-- The shop's own clock, one row: it read started_at when the machine's clock
-- read machine_started_at, and keeps the machine's pace since.
CREATE TABLE shop_clock (
    one_row            INTEGER PRIMARY KEY CHECK (one_row = 1),
    started_at         TEXT NOT NULL,
    machine_started_at TEXT NOT NULL
);

CREATE TABLE customers (
    customer_id     TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    level           TEXT NOT NULL,
    points          INTEGER NOT NULL CHECK (points >= 0),
    phone           TEXT NOT NULL,
    default_address TEXT NOT NULL
);

CREATE TABLE products (
    product_id  TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    category    TEXT NOT NULL,
    -- Other words customers use for the product (English and Chinese).
    aliases     TEXT NOT NULL,
    price_cents INTEGER NOT NULL CHECK (price_cents >= 0),
    stock       INTEGER NOT NULL CHECK (stock >= 0),
    description TEXT NOT NULL
);

CREATE TABLE coupons (
    coupon_id       TEXT PRIMARY KEY,
    customer_id     TEXT NOT NULL REFERENCES customers (customer_id),
    title           TEXT NOT NULL,
    discount_cents  INTEGER NOT NULL CHECK (discount_cents > 0),
    min_spend_cents INTEGER NOT NULL CHECK (min_spend_cents >= 0),
    -- Last day the coupon can be used.
    expires_on      TEXT NOT NULL,
    -- The order that used it; NULL while unused. Cancelling that order returns it.
    used_by_order   TEXT
);

CREATE TABLE orders (
    order_id       TEXT PRIMARY KEY,
    customer_id    TEXT NOT NULL REFERENCES customers (customer_id),
    amount_cents   INTEGER NOT NULL CHECK (amount_cents >= 0),
    status         TEXT NOT NULL CHECK (status IN
                       ('pending_payment', 'paid', 'shipped', 'delivered', 'cancelled', 'refunded')),
    tracking_no    TEXT,
    address        TEXT NOT NULL,
    coupon_id      TEXT REFERENCES coupons (coupon_id),
    payment_method TEXT CHECK (payment_method IN ('alipay', 'wechat_pay', 'card')),
    cancel_reason  TEXT,
    created_at     TEXT NOT NULL
);

CREATE TABLE order_items (
    order_id         TEXT NOT NULL REFERENCES orders (order_id),
    product_id       TEXT NOT NULL REFERENCES products (product_id),
    quantity         INTEGER NOT NULL CHECK (quantity > 0),
    unit_price_cents INTEGER NOT NULL CHECK (unit_price_cents >= 0),
    PRIMARY KEY (order_id, product_id)
);

CREATE TABLE logistics (
    tracking_no TEXT PRIMARY KEY,
    carrier     TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('in_transit', 'out_for_delivery', 'delivered')),
    signed_by   TEXT
);

CREATE TABLE logistics_events (
    tracking_no TEXT NOT NULL REFERENCES logistics (tracking_no),
    time        TEXT NOT NULL,
    description TEXT NOT NULL
);
CREATE INDEX logistics_events_by_tracking_no ON logistics_events (tracking_no, time);

CREATE TABLE refunds (
    refund_id    TEXT PRIMARY KEY,
    order_id     TEXT NOT NULL REFERENCES orders (order_id),
    reason       TEXT NOT NULL,
    amount_cents INTEGER NOT NULL CHECK (amount_cents >= 0),
    status       TEXT NOT NULL CHECK (status IN ('processing', 'completed')),
    created_at   TEXT NOT NULL
);
CREATE INDEX refunds_by_order ON refunds (order_id);

CREATE TABLE after_sales (
    ticket_id  TEXT PRIMARY KEY,
    order_id   TEXT NOT NULL REFERENCES orders (order_id),
    kind       TEXT NOT NULL CHECK (kind IN ('refund', 'return', 'exchange', 'repair')),
    reason     TEXT NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('pending_review', 'approved', 'completed', 'rejected')),
    created_at TEXT NOT NULL
);
CREATE INDEX after_sales_by_order ON after_sales (order_id);

CREATE TABLE support_tickets (
    ticket_id   TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers (customer_id),
    order_id    TEXT REFERENCES orders (order_id),
    subject     TEXT NOT NULL,
    description TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('open', 'closed')),
    created_at  TEXT NOT NULL
);

CREATE TABLE cart_items (
    customer_id TEXT NOT NULL REFERENCES customers (customer_id),
    product_id  TEXT NOT NULL REFERENCES products (product_id),
    quantity    INTEGER NOT NULL CHECK (quantity > 0),
    PRIMARY KEY (customer_id, product_id)
);

CREATE TABLE knowledge (
    article_id TEXT PRIMARY KEY,
    title      TEXT NOT NULL,
    category   TEXT NOT NULL,
    -- Space-separated lowercase words (English and Chinese) that point here.
    keywords   TEXT NOT NULL,
    content    TEXT NOT NULL
);

CREATE TABLE devices (
    device_id   TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers (customer_id),
    product_id  TEXT NOT NULL REFERENCES products (product_id),
    nickname    TEXT NOT NULL,
    online      INTEGER NOT NULL CHECK (online IN (0, 1)),
    firmware    TEXT NOT NULL,
    -- The error the device last reported, NULL when healthy.
    error       TEXT
);

-- Troubleshooting rules for diagnose_device: a rule applies to a product
-- category when one of its keywords occurs in the symptom.
CREATE TABLE diagnostics (
    category TEXT NOT NULL,
    keywords TEXT NOT NULL,
    cause    TEXT NOT NULL,
    -- Steps separated by '|', in the order to try them.
    steps    TEXT NOT NULL
);
