//! The demo shop's SQLite database: opening, schema, seed and the read-only
//! accessors tests use. The business operations are in `shop.rs`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rusqlite::config::DbConfig;
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use super::clock::{DemoClock, ShopTime};

const SCHEMA: &str = include_str!("schema.sql");
const SEED: &str = include_str!("seed.sql");
/// The schema version this build creates and reads (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 2;

/// The "Bit Select" shop of the articles in an embedded SQLite database.
///
/// A new database (a missing or empty file, or memory) gets the schema and
/// the seed data, and its clock starts at the seed's moment; an existing file
/// is used as it is, so writes persist across runs and its clock goes on
/// from where it was (see [`DemoClock::Running`]). All access goes through
/// one connection behind a mutex: every query is a few microseconds, and
/// holding the lock across a check and its write makes each operation atomic
/// in the process; the write's transaction (`write_transaction`) makes it
/// atomic against other processes on the file.
pub struct DemoDb {
    conn: Mutex<Connection>,
    clock: DemoClock,
    in_file: bool,
}

/// Why the demo database could not be opened or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DemoDbError {
    /// The cause is in the message, so not also the error's `source()`.
    #[error("cannot open the demo database at {}: {cause}", path.display())]
    Open {
        path: PathBuf,
        cause: rusqlite::Error,
    },
    #[error(
        "the demo database at {} has schema version {found}, not the supported version \
         {supported} (another build made it); delete it to start a fresh, seeded shop",
        path.display()
    )]
    UnsupportedSchema {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    #[error(
        "{} is not a demo database: it already holds {tables} table(s) and no demo schema \
         version; the demo shop only seeds an empty or new file (choose another --db)",
        path.display()
    )]
    NotTheDemo { path: PathBuf, tables: i64 },
    #[error("demo database: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// A transaction that takes the write lock when it begins. A deferred one
/// reads first and, when another process (a `skillhost run` on the same
/// file) wrote meanwhile, fails its first write at once with "database is
/// locked" instead of waiting its turn.
pub(super) fn write_transaction(conn: &mut Connection) -> rusqlite::Result<Transaction<'_>> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
}

/// Prepared statements kept per connection; more than the shop has queries.
const STATEMENT_CACHE: usize = 64;

/// `query_row` and `execute` through the prepared-statement cache
/// (rusqlite's own `Connection::query_row` and `Connection::execute` prepare
/// the SQL again on every call).
pub(super) trait CachedStatements {
    fn query_row_cached<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: rusqlite::Params,
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>;

    /// Runs `sql` once; the number of rows it changed.
    fn execute_cached<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize>;
}

impl CachedStatements for Connection {
    fn query_row_cached<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: rusqlite::Params,
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    {
        self.prepare_cached(sql)?.query_row(params, f)
    }

    fn execute_cached<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }
}

impl DemoDb {
    /// Opens (or creates and seeds) the database file at `path`, on the
    /// shop's own clock; see [`DemoDb::with_clock`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, DemoDbError> {
        let path = path.as_ref();
        let conn = Connection::open(path).map_err(|cause| DemoDbError::Open {
            path: path.to_owned(),
            cause,
        })?;
        let db = Self::init(conn, path)?;
        // Set once the file is known to be the shop's, never on another
        // application's. With a write-ahead log, readers (most calls) take
        // no file locks and check no hot journal, and do not wait for a
        // writer; a commit syncs the log only at checkpoints (`NORMAL`): a
        // power cut may lose the last writes, never the file.
        {
            let conn = db.lock();
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |_| Ok(()))?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
        }
        Ok(Self {
            in_file: true,
            ..db
        })
    }

    /// A fresh, seeded database in memory, its clock started at the seed's
    /// moment; nothing persists.
    pub fn in_memory() -> Result<Self, DemoDbError> {
        Self::init(Connection::open_in_memory()?, Path::new(":memory:"))
    }

    /// Whether the database is a file, where an operation can block: a
    /// checkpoint syncs the file, and a write waits up to SQLite's busy
    /// timeout (rusqlite's 5 s) while another process holds the write lock.
    pub(super) fn in_file(&self) -> bool {
        self.in_file
    }

    /// Replaces the shop's own clock, e.g. with [`DemoClock::System`] for the
    /// machine's (the seeded coupons then expire in real time), or a fixed
    /// instant so that refund ids are stable in tests. Not kept in the
    /// database: the next open is on the shop's clock again.
    #[must_use]
    pub fn with_clock(mut self, clock: DemoClock) -> Self {
        self.clock = clock;
        self
    }

    /// The clock the shop reads "now" from.
    pub fn clock(&self) -> DemoClock {
        self.clock
    }

    fn init(mut conn: Connection, path: &Path) -> Result<Self, DemoDbError> {
        conn.pragma_update(None, "foreign_keys", true)?;
        // Every query the shop runs stays prepared: parsing SQL costs more
        // than running these one-row lookups.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        // Plans that never depend on bound values (the query planner
        // stability guarantee), so that cached statements stay prepared.
        // Without it, SQLite plans a join or an ORDER BY query (`order_lines`,
        // the logistics events) by looking at whether `col = ?N` binds 0 or 1
        // and marks the statement for planning again on a new binding; as the
        // statement cache clears the bindings of every statement it takes
        // back, each call parsed and planned such SQL again. The shop binds
        // ids, never 0 or 1, so its plans are the same.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
        let tables: i64 =
            conn.query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))?;
        match version {
            // Another application's database: never seeded into.
            0 if tables > 0 => {
                return Err(DemoDbError::NotTheDemo {
                    path: path.to_owned(),
                    tables,
                });
            }
            0 => {
                let tx = conn.transaction()?;
                tx.execute_batch(SCHEMA)?;
                tx.execute_batch(SEED)?;
                tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
                tx.commit()?;
            }
            SCHEMA_VERSION => {}
            found => {
                return Err(DemoDbError::UnsupportedSchema {
                    path: path.to_owned(),
                    found,
                    supported: SCHEMA_VERSION,
                });
            }
        }
        // The default clock is the shop's own, started by the seed (see
        // seed.sql), so that the seeded data reads as in the articles on any
        // date; an embedder who wants the machine's says so (`with_clock`).
        let (started_at, machine_started_at) = conn.query_row(
            "SELECT started_at, machine_started_at FROM shop_clock",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        Ok(Self {
            conn: Mutex::new(conn),
            clock: DemoClock::Running {
                started_at,
                machine_started_at,
            },
            in_file: false,
        })
    }

    /// The connection, for one operation. A panic while the lock was held
    /// cannot leave half a write behind (writes run in a transaction that
    /// rolls back when dropped), so a poisoned lock is safe to take over.
    pub(super) fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The status of an order, `None` when there is no such order.
    pub fn order_status(&self, order_id: &str) -> Result<Option<OrderStatus>, DemoDbError> {
        let status = self
            .lock()
            .query_row_cached(
                "SELECT status FROM orders WHERE order_id = ?1",
                params![order_id],
                |row| row.get(0),
            )
            .optional()?;
        Ok(status)
    }

    /// The refunds recorded for an order, oldest first.
    pub fn refunds_for(&self, order_id: &str) -> Result<Vec<Refund>, DemoDbError> {
        let conn = self.lock();
        let mut statement = conn.prepare_cached(
            "SELECT refund_id, order_id, reason, amount_cents, status, created_at
             FROM refunds WHERE order_id = ?1 ORDER BY created_at, refund_id",
        )?;
        let refunds = statement
            .query_map(params![order_id], |row| {
                Ok(Refund {
                    refund_id: row.get(0)?,
                    order_id: row.get(1)?,
                    reason: row.get(2)?,
                    amount_cents: row.get(3)?,
                    status: row.get(4)?,
                    created_at: row.get(5)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(refunds)
    }
}

/// The life cycle of an order. Stored and shown as snake_case text.
///
/// `pending_payment` → `paid` → `shipped` → `delivered`; `cancelled` before
/// shipping; `refunded` once a refund of a delivered order has completed (a
/// refund that is still `processing` leaves the order `delivered`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderStatus {
    PendingPayment,
    Paid,
    Shipped,
    Delivered,
    Cancelled,
    Refunded,
}

impl OrderStatus {
    const ALL: [Self; 6] = [
        Self::PendingPayment,
        Self::Paid,
        Self::Shipped,
        Self::Delivered,
        Self::Cancelled,
        Self::Refunded,
    ];

    /// The snake_case name, e.g. `pending_payment`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PendingPayment => "pending_payment",
            Self::Paid => "paid",
            Self::Shipped => "shipped",
            Self::Delivered => "delivered",
            Self::Cancelled => "cancelled",
            Self::Refunded => "refunded",
        }
    }
}

/// Where a refund is: money on its way back, or back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundStatus {
    Processing,
    Completed,
}

impl RefundStatus {
    const ALL: [Self; 2] = [Self::Processing, Self::Completed];

    /// The snake_case name, e.g. `processing`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Processing => "processing",
            Self::Completed => "completed",
        }
    }
}

/// Text columns that hold one of a fixed set of names.
macro_rules! sql_text_enum {
    ($type:ty) => {
        impl fmt::Display for $type {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromSql for $type {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                let text = value.as_str()?;
                <$type>::ALL
                    .into_iter()
                    .find(|variant| variant.as_str() == text)
                    .ok_or_else(|| {
                        FromSqlError::Other(
                            format!("unknown {} `{text}`", stringify!($type)).into(),
                        )
                    })
            }
        }

        impl ToSql for $type {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.as_str()))
            }
        }
    };
}

sql_text_enum!(OrderStatus);
sql_text_enum!(RefundStatus);

impl FromSql for ShopTime {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        value
            .as_str()?
            .parse()
            .map_err(|error| FromSqlError::Other(Box::new(error)))
    }
}

/// A refund as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refund {
    /// `RF` + shop-local date + a 3-digit sequence of the day, e.g. `RF20260629001`.
    pub refund_id: String,
    pub order_id: String,
    pub reason: String,
    /// In cents (CNY fen).
    pub amount_cents: i64,
    pub status: RefundStatus,
    /// Shop-local `YYYY-MM-DD HH:MM:SS`.
    pub created_at: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_new_or_empty_file_is_seeded_and_a_seeded_one_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let other = dir.path().join("app.sqlite");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE accounts (id INTEGER PRIMARY KEY);")
            .unwrap();
        let error = DemoDb::open(&other).err().expect("refused");
        assert!(
            matches!(error, DemoDbError::NotTheDemo { tables: 1, .. }),
            "{error}"
        );
        let tables: i64 = Connection::open(&other)
            .unwrap()
            .query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
            .unwrap();
        assert_eq!(tables, 1, "nothing was added");
        let journal_mode = |path: &Path| -> String {
            Connection::open(path)
                .unwrap()
                .pragma_query_value(None, "journal_mode", |row| row.get(0))
                .unwrap()
        };
        assert_eq!(
            journal_mode(&other),
            "delete",
            "its journal is left as it was"
        );

        let demo = dir.path().join("demo.db");
        drop(DemoDb::open(&demo).unwrap());
        let reopened = DemoDb::open(&demo).expect("the seeded file opens again");
        assert_eq!(journal_mode(&demo), "wal");
        drop(reopened);
    }
}
