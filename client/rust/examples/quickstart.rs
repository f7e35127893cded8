//! The README's quick example: one operation run once, then replayed.
//! `cargo run -p opreg-client --example quickstart -- http://127.0.0.1:50051`

use opreg_client::{Client, RunOnce, Success};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint = std::env::args()
        .nth(1)
        .unwrap_or("http://127.0.0.1:50051".into());
    let client = Client::connect(endpoint).await?;
    for _ in 0..2 {
        let done = RunOnce::new(
            &client,
            "quickstart",
            "debit:order-42",
            serde_json::json!({"amount": 100}),
        )
        .run(|lease| async move {
            Ok(Success::new(format!(
                "debited under token {}",
                lease.fencing_token()
            )))
        })
        .await?;
        println!(
            "{} (replayed: {})",
            String::from_utf8_lossy(&done.result),
            done.replayed
        );
    }
    Ok(())
}
