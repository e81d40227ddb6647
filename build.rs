//! Rebuilds when a migration is added or changed: `sqlx::migrate!` embeds `migrations/` at
//! compile time, and Cargo does not otherwise know to look there.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
