//! The SQLite and PostgreSQL schemas agree: the same tables, the same columns per table (each
//! of the same type class, both nullable or neither), the same primary keys and the same
//! indexes by name. The store writes each statement once for both backends, so a column one
//! dialect's migrations forgot is a failure on that backend only, found late.
//!
//! Full-text search is each database's own and left out: SQLite's FTS5 virtual tables (with
//! their shadow tables), PostgreSQL's `tsvector` columns and GIN indexes.
//!
//! Always: both dialects' migration files are read (their CREATE/ALTER/DROP statements
//! replayed in order) and compared, and the SQLite result is checked against a real SQLite
//! database the SQLite migrations built, so the reading is held to the real thing. With
//! `ORCA_TEST_POSTGRES`, also a real PostgreSQL schema the PostgreSQL migrations built,
//! against the real SQLite one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sqlx::Connection;

use crate::support::db;

/// A column's type, as far as the store cares: the two dialects spell them differently.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum TypeClass {
    Text,
    Integer,
    Real,
    Json,
    Bytes,
    Boolean,
    Other(String),
}

impl TypeClass {
    fn of(declared: &str) -> TypeClass {
        let declared = declared.trim().to_ascii_uppercase();
        match declared.as_str() {
            "TEXT" | "VARCHAR" | "CHARACTER VARYING" | "CHAR" | "CHARACTER" => TypeClass::Text,
            "INTEGER" | "BIGINT" | "INT" | "SMALLINT" | "INT8" | "INT4" | "BIGSERIAL"
            | "SERIAL" => TypeClass::Integer,
            "REAL" | "DOUBLE PRECISION" | "FLOAT" | "NUMERIC" => TypeClass::Real,
            "JSON" | "JSONB" => TypeClass::Json,
            "BLOB" | "BYTEA" => TypeClass::Bytes,
            "BOOLEAN" | "BOOL" => TypeClass::Boolean,
            _ => TypeClass::Other(declared),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Column {
    class: TypeClass,
    not_null: bool,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Table {
    columns: BTreeMap<String, Column>,
    primary_key: Vec<String>,
}

/// A schema: tables by name, and each index's table by the index's name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Schema {
    tables: BTreeMap<String, Table>,
    indexes: BTreeMap<String, String>,
}

impl Schema {
    /// Primary-key columns are not null on both (SQLite does not say so of a TEXT key).
    fn normalised(mut self) -> Schema {
        for table in self.tables.values_mut() {
            for key in &table.primary_key {
                if let Some(column) = table.columns.get_mut(key) {
                    column.not_null = true;
                }
            }
        }
        self
    }
}

/// Every difference between `a` and `b`, one line each.
fn differences(a_name: &str, a: &Schema, b_name: &str, b: &Schema) -> Vec<String> {
    let mut out = Vec::new();
    for (name, table) in &a.tables {
        let Some(other) = b.tables.get(name) else {
            out.push(format!("table `{name}` is in {a_name} only"));
            continue;
        };
        for (column, spec) in &table.columns {
            match other.columns.get(column) {
                None => out.push(format!("column `{name}.{column}` is in {a_name} only")),
                Some(o) if o != spec => out.push(format!(
                    "column `{name}.{column}`: {a_name} {spec:?}, {b_name} {o:?}"
                )),
                Some(_) => {}
            }
        }
        for column in other.columns.keys() {
            if !table.columns.contains_key(column) {
                out.push(format!("column `{name}.{column}` is in {b_name} only"));
            }
        }
        if table.primary_key != other.primary_key {
            out.push(format!(
                "primary key of `{name}`: {a_name} {:?}, {b_name} {:?}",
                table.primary_key, other.primary_key
            ));
        }
    }
    for name in b.tables.keys() {
        if !a.tables.contains_key(name) {
            out.push(format!("table `{name}` is in {b_name} only"));
        }
    }
    for (index, table) in &a.indexes {
        match b.indexes.get(index) {
            None => out.push(format!(
                "index `{index}` (on `{table}`) is in {a_name} only"
            )),
            Some(t) if t != table => out.push(format!(
                "index `{index}`: on `{table}` in {a_name}, on `{t}` in {b_name}"
            )),
            Some(_) => {}
        }
    }
    for (index, table) in &b.indexes {
        if !a.indexes.contains_key(index) {
            out.push(format!(
                "index `{index}` (on `{table}`) is in {b_name} only"
            ));
        }
    }
    out
}

fn assert_agree(a_name: &str, a: &Schema, b_name: &str, b: &Schema) {
    let found = differences(a_name, a, b_name, b);
    assert!(
        found.is_empty(),
        "{a_name} and {b_name} disagree:\n  {}",
        found.join("\n  ")
    );
}

fn migrations(dialect: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(dialect)
}

#[test]
fn both_dialects_migration_files_make_the_same_schema() {
    let sqlite = read_migrations(&migrations("sqlite"));
    let postgres = read_migrations(&migrations("postgres"));
    assert!(
        sqlite.tables.len() > 10 && sqlite.indexes.len() > 5,
        "read the SQLite migrations: {sqlite:?}"
    );
    assert_agree(
        "migrations/sqlite",
        &sqlite,
        "migrations/postgres",
        &postgres,
    );
}

#[tokio::test]
async fn the_sqlite_migrations_make_what_their_files_say_and_postgres_agrees() {
    let read = read_migrations(&migrations("sqlite"));
    let real = sqlite_schema().await;
    assert_agree(
        "migrations/sqlite (read)",
        &read,
        "SQLite (migrated)",
        &real,
    );
    // On a PostgreSQL run, the real PostgreSQL schema too.
    if let Some(server) = db::postgres_server() {
        let dir = tempfile::tempdir().unwrap();
        let postgres = postgres_schema(&db::database_url_on(&server, dir.path())).await;
        assert_agree(
            "PostgreSQL (migrated)",
            &postgres,
            "SQLite (migrated)",
            &real,
        );
    }
}

/// The schema a fresh SQLite database has once its migrations ran.
async fn sqlite_schema() -> Schema {
    let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:")
        .await
        .unwrap();
    let migrator = sqlx::migrate::Migrator::new(migrations("sqlite"))
        .await
        .unwrap();
    migrator.run(&mut conn).await.unwrap();
    let columns: Vec<(String, String, String, i64, i64)> = sqlx::query_as(
        "SELECT m.name, p.name, p.type, p.\"notnull\", p.pk \
         FROM sqlite_master m JOIN pragma_table_info(m.name) p \
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> '_sqlx_migrations' \
           AND NOT EXISTS (SELECT 1 FROM sqlite_master v \
                           WHERE v.sql LIKE 'CREATE VIRTUAL TABLE%' \
                             AND (m.name = v.name OR m.name LIKE v.name || '\\_%' ESCAPE '\\')) \
         ORDER BY m.name, p.pk, p.cid",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let mut schema = Schema::default();
    for (table, column, declared, not_null, pk) in columns {
        let table = schema.tables.entry(table).or_default();
        if pk > 0 {
            table.primary_key.push(column.clone());
        }
        let class = TypeClass::of(&declared);
        let not_null = not_null != 0;
        table.columns.insert(column, Column { class, not_null });
    }
    // Indexes a statement made (`sql` is null for those SQLite makes for a key).
    let indexes: Vec<(String, String)> = sqlx::query_as(
        "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    schema.indexes = indexes.into_iter().collect();
    schema.normalised()
}

/// The schema a fresh PostgreSQL schema (the `search_path` of `url`) has once its migrations
/// ran.
async fn postgres_schema(url: &str) -> Schema {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let migrator = sqlx::migrate::Migrator::new(migrations("postgres"))
        .await
        .unwrap();
    migrator.run(&mut conn).await.unwrap();
    let columns: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text, data_type::text, is_nullable::text \
         FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name <> '_sqlx_migrations' \
           AND data_type <> 'tsvector'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let mut schema = Schema::default();
    for (table, column, declared, nullable) in columns {
        let class = TypeClass::of(&declared);
        let not_null = nullable == "NO";
        let table = schema.tables.entry(table).or_default();
        table.columns.insert(column, Column { class, not_null });
    }
    let keys: Vec<(String, String)> = sqlx::query_as(
        "SELECT k.table_name::text, k.column_name::text \
         FROM information_schema.table_constraints c \
         JOIN information_schema.key_column_usage k \
           ON k.constraint_name = c.constraint_name AND k.table_schema = c.table_schema \
         WHERE c.constraint_type = 'PRIMARY KEY' AND c.table_schema = current_schema() \
         ORDER BY k.table_name, k.ordinal_position",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    for (table, column) in keys {
        if let Some(table) = schema.tables.get_mut(&table) {
            table.primary_key.push(column);
        }
    }
    // Indexes a statement made, not those behind a primary key or a unique constraint.
    let indexes: Vec<(String, String)> = sqlx::query_as(
        "SELECT i.relname::text, t.relname::text FROM pg_index x \
         JOIN pg_class i ON i.oid = x.indexrelid \
         JOIN pg_class t ON t.oid = x.indrelid \
         JOIN pg_namespace n ON n.oid = t.relnamespace \
         JOIN pg_am a ON a.oid = i.relam \
         WHERE n.nspname = current_schema() AND t.relname <> '_sqlx_migrations' \
           AND a.amname <> 'gin' \
           AND NOT EXISTS (SELECT 1 FROM pg_constraint c \
                           WHERE c.conindid = x.indexrelid AND c.contype IN ('p', 'u', 'x'))",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    schema.indexes = indexes.into_iter().collect();
    let _ = conn.close().await;
    schema.normalised()
}

/// The schema a folder of migrations makes, read from its files: every `CREATE TABLE`,
/// `ALTER TABLE` (add, drop or rename a column; rename the table), `DROP TABLE`,
/// `CREATE INDEX` and `DROP INDEX`, in file order. Data statements, triggers and functions
/// are passed over; any other `CREATE`, `ALTER` or `DROP` fails the test, so a statement this
/// reading does not know is never silently left out.
fn read_migrations(dir: &Path) -> Schema {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    let mut schema = Schema::default();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for statement in statements(&text) {
            apply(&mut schema, &statement)
                .unwrap_or_else(|e| panic!("{}: {e}: {statement}", file.display()));
        }
    }
    schema.normalised()
}

/// The statements of a migration file, comments removed: split at `;` outside quotes and
/// `$$` bodies, a trigger's `BEGIN … END` kept whole.
fn statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let (mut quoted, mut dollar) = (false, false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' if !dollar => quoted = !quoted,
            '$' if !quoted && chars.peek() == Some(&'$') => {
                chars.next();
                dollar = !dollar;
                current.push_str("$$");
                continue;
            }
            '-' if !quoted && !dollar && chars.peek() == Some(&'-') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
                current.push('\n');
                continue;
            }
            ';' if !quoted && !dollar => {
                let upper = current.trim().to_ascii_uppercase();
                let open_trigger = upper.starts_with("CREATE TRIGGER")
                    && upper.contains("BEGIN")
                    && !upper.ends_with("END");
                if !open_trigger {
                    out.push(std::mem::take(&mut current).trim().to_owned());
                    continue;
                }
            }
            _ => {}
        }
        current.push(c);
    }
    out.push(current.trim().to_owned());
    out.retain(|s| !s.is_empty());
    out
}

/// Words and punctuation of a statement, quoted strings as one token each.
fn tokens(statement: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = statement.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '\'' || c == '"' {
            chars.next();
            let mut quoted = String::from(c);
            for q in chars.by_ref() {
                quoted.push(q);
                if q == c {
                    break;
                }
            }
            out.push(quoted);
        } else if c.is_alphanumeric() || c == '_' {
            let mut word = String::new();
            while let Some(&w) = chars.peek() {
                if !(w.is_alphanumeric() || w == '_') {
                    break;
                }
                word.push(w);
                chars.next();
            }
            out.push(word);
        } else {
            out.push(c.to_string());
            chars.next();
        }
    }
    out
}

fn is(token: Option<&String>, word: &str) -> bool {
    token.is_some_and(|t| t.eq_ignore_ascii_case(word))
}

/// Applies one statement to `schema`.
fn apply(schema: &mut Schema, statement: &str) -> Result<(), String> {
    let t = tokens(statement);
    let mut at = 0;
    let skip = |words: &[&str], at: &mut usize| {
        let all = words.iter().enumerate().all(|(i, w)| is(t.get(*at + i), w));
        if all {
            *at += words.len();
        }
        all
    };
    if skip(&["CREATE", "TABLE"], &mut at) {
        skip(&["IF", "NOT", "EXISTS"], &mut at);
        let name = t[at].clone();
        let table = create_table(&t[at + 1..])?;
        schema.tables.insert(name, table);
    } else if skip(&["ALTER", "TABLE"], &mut at) {
        alter_table(schema, &t[at..])?;
    } else if skip(&["DROP", "TABLE"], &mut at) {
        skip(&["IF", "EXISTS"], &mut at);
        let name = &t[at];
        schema.tables.remove(name);
        schema.indexes.retain(|_, table| table != name);
    } else if skip(&["CREATE", "VIRTUAL", "TABLE"], &mut at) {
        // Full-text search (SQLite's FTS5): the database's own, not compared.
    } else if skip(&["CREATE", "INDEX"], &mut at) || skip(&["CREATE", "UNIQUE", "INDEX"], &mut at) {
        skip(&["IF", "NOT", "EXISTS"], &mut at);
        if t.windows(2)
            .any(|w| is(Some(&w[0]), "USING") && is(Some(&w[1]), "GIN"))
        {
            return Ok(()); // PostgreSQL's full-text index
        }
        if !is(t.get(at + 1), "ON") {
            return Err("an index without a name".into());
        }
        schema.indexes.insert(t[at].clone(), t[at + 2].clone());
    } else if skip(&["DROP", "INDEX"], &mut at) {
        skip(&["IF", "EXISTS"], &mut at);
        schema.indexes.remove(&t[at]);
    } else if skip(&["CREATE", "TRIGGER"], &mut at)
        || skip(&["CREATE", "FUNCTION"], &mut at)
        || skip(&["CREATE", "OR", "REPLACE", "FUNCTION"], &mut at)
        || skip(&["DROP", "TRIGGER"], &mut at)
        || skip(&["DROP", "FUNCTION"], &mut at)
    {
        // Behaviour, not shape.
    } else if ["CREATE", "ALTER", "DROP"].iter().any(|w| is(t.first(), w)) {
        return Err("a schema statement this test cannot read".into());
    }
    Ok(())
}

/// The table a `CREATE TABLE`'s parenthesised body (`t` starts at its `(`) declares.
fn create_table(t: &[String]) -> Result<Table, String> {
    if t.first().map(String::as_str) != Some("(") {
        return Err("CREATE TABLE without a column list".into());
    }
    let mut table = Table::default();
    let mut depth = 0;
    let mut item: Vec<String> = Vec::new();
    for token in &t[1..] {
        match token.as_str() {
            "(" => depth += 1,
            ")" if depth == 0 => {
                table_item(&mut table, &item)?;
                return Ok(table);
            }
            ")" => depth -= 1,
            "," if depth == 0 => {
                table_item(&mut table, &std::mem::take(&mut item))?;
                continue;
            }
            _ => {}
        }
        item.push(token.clone());
    }
    Err("CREATE TABLE's column list is not closed".into())
}

/// One item of a table's body: a column, or a table constraint.
fn table_item(table: &mut Table, item: &[String]) -> Result<(), String> {
    let first = item.first();
    if is(first, "PRIMARY") {
        table.primary_key = item
            .iter()
            .skip(2)
            .filter(|w| !matches!(w.as_str(), "(" | ")" | ","))
            .cloned()
            .collect();
        return Ok(());
    }
    let constraints = ["UNIQUE", "CONSTRAINT", "FOREIGN", "CHECK"];
    if constraints.iter().any(|w| is(first, w)) {
        return Ok(());
    }
    if is(item.get(1), "tsvector") {
        return Ok(()); // PostgreSQL's full-text column
    }
    let (name, column) = column(item)?;
    let inline_key = item
        .windows(2)
        .any(|w| is(Some(&w[0]), "PRIMARY") && is(Some(&w[1]), "KEY"));
    if inline_key {
        table.primary_key = vec![name.clone()];
    }
    table.columns.insert(name, column);
    Ok(())
}

/// A column definition: its name, type and whether it is `NOT NULL`.
fn column(item: &[String]) -> Result<(String, Column), String> {
    let [name, declared, rest @ ..] = item else {
        return Err(format!("a column without a type: {item:?}"));
    };
    let mut declared = declared.clone();
    if is(rest.first(), "PRECISION") || is(rest.first(), "VARYING") {
        declared = format!("{declared} {}", rest[0]);
    }
    let not_null = item
        .windows(2)
        .any(|w| is(Some(&w[0]), "NOT") && is(Some(&w[1]), "NULL"));
    let class = TypeClass::of(&declared);
    Ok((
        name.trim_matches('"').to_owned(),
        Column { class, not_null },
    ))
}

/// `ALTER TABLE` (`t` starts at the table's name).
fn alter_table(schema: &mut Schema, t: &[String]) -> Result<(), String> {
    let name = t.first().ok_or("ALTER TABLE without a table")?.clone();
    let rest = &t[1..];
    let table = schema
        .tables
        .get_mut(&name)
        .ok_or_else(|| format!("ALTER TABLE of an unknown table `{name}`"))?;
    let word = |i: usize| {
        rest.get(i)
            .map(|w| w.to_ascii_uppercase())
            .unwrap_or_default()
    };
    match (word(0).as_str(), word(1).as_str()) {
        ("ADD", "COLUMN") => {
            let (column, spec) = column(&rest[2..])?;
            table.columns.insert(column, spec);
        }
        ("DROP", "COLUMN") => {
            table.columns.remove(&rest[2]);
        }
        ("RENAME", "COLUMN") if is(rest.get(3), "TO") => {
            let spec = table.columns.remove(&rest[2]).ok_or("renames no column")?;
            table.columns.insert(rest[4].clone(), spec);
        }
        ("RENAME", "TO") => {
            let table = schema.tables.remove(&name).unwrap();
            let new_name = rest[2].clone();
            for on in schema.indexes.values_mut() {
                if *on == name {
                    *on = new_name.clone();
                }
            }
            schema.tables.insert(new_name, table);
        }
        _ => return Err("an ALTER TABLE this test cannot read".into()),
    }
    Ok(())
}
