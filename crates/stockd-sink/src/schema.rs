//! The sink's tables, made and migrated by the sink itself.
//!
//! Migrations are numbered and only ever appended. The missing ones run in one transaction that
//! also records their numbers, under an advisory lock, so that two sinks starting at once apply
//! each migration once, and a migration that fails leaves the database as it was. A database migrated by a newer sink
//! (a number this one does not know) is refused: this sink would write rows that sink does not
//! expect.

use tokio_postgres::Client;

/// The migrations, in order: (number, what it does, SQL).
pub const MIGRATIONS: &[(i32, &str, &str)] = &[(
    1,
    "events, holds, pools, cursors and gaps",
    r#"
CREATE TABLE stockd_events (
    partition integer NOT NULL,
    seq bigint NOT NULL,
    at_ms bigint NOT NULL,
    type text NOT NULL,
    body jsonb NOT NULL,
    PRIMARY KEY (partition, seq)
);
CREATE TABLE stockd_holds (
    hold_id text COLLATE "C" PRIMARY KEY,
    status text NOT NULL,
    user_id text,
    items jsonb NOT NULL,
    created_at_ms bigint,
    expires_at_ms bigint NOT NULL,
    finished_at_ms bigint,
    partition integer NOT NULL,
    updated_at_ms bigint NOT NULL
);
CREATE INDEX stockd_holds_user ON stockd_holds (user_id) WHERE user_id IS NOT NULL;
CREATE INDEX stockd_holds_held ON stockd_holds (expires_at_ms) WHERE status = 'held';
CREATE TABLE stockd_pools (
    pool text COLLATE "C" PRIMARY KEY,
    total bigint NOT NULL,
    available bigint NOT NULL,
    held bigint NOT NULL,
    sold bigint NOT NULL,
    deleted boolean NOT NULL DEFAULT false,
    updated_at_ms bigint NOT NULL
);
CREATE TABLE stockd_sink_cursors (
    partition integer PRIMARY KEY,
    after_seq bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE stockd_sink_gaps (
    partition integer NOT NULL,
    after_seq bigint NOT NULL,
    oldest_seq bigint NOT NULL,
    detected_at timestamptz NOT NULL DEFAULT now(),
    repaired_at timestamptz,
    PRIMARY KEY (partition, after_seq)
);
"#,
)];

/// Why the tables cannot be made ready.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error(
        "schema name {0:?} is not allowed: use 1 to 63 of [a-z0-9_], starting with a letter or _"
    )]
    BadName(String),
    #[error(
        "the tables in schema {schema:?} are at migration {found}, newer than this sink knows \
         (up to {known}): run the newer stockd"
    )]
    Newer {
        schema: String,
        found: i32,
        known: i32,
    },
    #[error("postgres: {0}")]
    Postgres(#[from] tokio_postgres::Error),
}

/// Checks a schema name: plain lower-case identifiers only, so that it needs no quoting rules
/// beyond double quotes and cannot smuggle SQL.
pub fn check_name(schema: &str) -> Result<(), SchemaError> {
    let mut bytes = schema.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
    let rest_ok = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if first_ok && rest_ok && schema.len() <= 63 {
        Ok(())
    } else {
        Err(SchemaError::BadName(schema.to_owned()))
    }
}

/// Points the connection at `schema`, a name [`check_name`] accepted (every statement of the
/// sink names its tables unqualified).
pub async fn use_schema(client: &Client, schema: &str) -> Result<(), tokio_postgres::Error> {
    debug_assert!(check_name(schema).is_ok(), "{schema:?} was not checked");
    client
        .batch_execute(&format!("SET search_path TO \"{schema}\""))
        .await
}

/// Makes `schema` and its tables, applying the migrations it lacks. Returns the numbers applied.
pub async fn migrate(client: &mut Client, schema: &str) -> Result<Vec<i32>, SchemaError> {
    check_name(schema)?;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS \"{schema}\"; SET search_path TO \"{schema}\""
        ))
        .await?;
    let known = MIGRATIONS.last().map_or(0, |(number, _, _)| *number);
    let mut applied = Vec::new();
    let transaction = client.transaction().await?;
    // One sink at a time per schema migrates; the lock ends with the transaction.
    transaction
        .execute(
            "SELECT pg_advisory_xact_lock(hashtext('stockd_sink_migrations.' || $1))",
            &[&schema],
        )
        .await?;
    transaction
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS stockd_sink_migrations (
                 version integer PRIMARY KEY,
                 description text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await?;
    let found: i32 = transaction
        .query_one(
            "SELECT coalesce(max(version), 0) FROM stockd_sink_migrations",
            &[],
        )
        .await?
        .get(0);
    if found > known {
        return Err(SchemaError::Newer {
            schema: schema.to_owned(),
            found,
            known,
        });
    }
    for (number, description, sql) in MIGRATIONS {
        if *number <= found {
            continue;
        }
        transaction.batch_execute(sql).await?;
        transaction
            .execute(
                "INSERT INTO stockd_sink_migrations (version, description) VALUES ($1, $2)",
                &[number, description],
            )
            .await?;
        applied.push(*number);
    }
    transaction.commit().await?;
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        for good in ["public", "shop_1", "_stockd"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "Shop", "1shop", "a\"b", "a;drop", &"a".repeat(64)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn migrations_are_numbered_from_one_without_holes() {
        for (index, (number, _, _)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(*number as usize, index + 1);
        }
    }
}
