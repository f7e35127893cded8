//! `sqlx::migrate!` reads `migrations/` when the server compiles; without this
//! a new or edited migration would not reach the binary until something else
//! changed.

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
