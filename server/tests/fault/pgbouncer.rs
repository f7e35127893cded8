//! Debian's PgBouncer in front of the fault cluster: a transaction pool for
//! the registry's calls and a session pool for what must keep one server
//! connection (migrations, the maintenance connection, the gauges).

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use sqlx::PgConnection;
use sqlx::postgres::PgConnectOptions;

use super::{Cluster, free_address, wait_until_listening};

pub struct PgBouncer {
    pub address: SocketAddr,
    child: Child,
}

impl PgBouncer {
    /// Pools `database` in transaction mode over at most `servers` server
    /// connections, and in session mode as `{database}_session`.
    pub fn start(cluster: &Cluster, database: &str, servers: u32) -> Self {
        let dir = cluster.root.join(format!("pgbouncer-{database}"));
        std::fs::create_dir_all(&dir).unwrap();
        let address = free_address();
        let socket_dir = cluster.socket.parent().unwrap().display().to_string();
        let config = format!(
            "[databases]
{database} = host={socket_dir} port=5432 dbname={database} pool_size={servers}
{database}_session = host={socket_dir} port=5432 dbname={database} pool_mode=session pool_size=8

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {dir}/users.txt
admin_users = {user}
pool_mode = transaction
max_client_conn = 500
server_login_retry = 1
server_connect_timeout = 5
query_wait_timeout = 10
logfile = {dir}/pgbouncer.log
pidfile = {dir}/pgbouncer.pid
",
            port = address.port(),
            dir = dir.display(),
            user = opreg_embedded::SUPERUSER,
        );
        std::fs::write(dir.join("pgbouncer.ini"), config).unwrap();
        std::fs::write(
            dir.join("users.txt"),
            format!("\"{}\" \"\"\n", opreg_embedded::SUPERUSER),
        )
        .unwrap();
        let mut command = Command::new("pgbouncer");
        // PgBouncer refuses to run as root, like PostgreSQL; it then runs as
        // the user the cluster runs as, which needs its directory.
        if opreg_embedded::is_root() {
            make_writable_by_all(&dir);
            command.args(["-u", &cluster_user(&cluster.root)]);
        }
        let mut child = command
            .arg(dir.join("pgbouncer.ini"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgbouncer starts");
        wait_until_listening(address, || {
            let status = child.try_wait().ok().flatten()?;
            Some(format!("pgbouncer exited ({status}) before listening"))
        });
        Self { address, child }
    }

    /// Client connections PgBouncer holds for `database`, from its console.
    pub async fn clients(&self, database: &str) -> usize {
        self.count("SHOW CLIENTS", database).await
    }

    /// Server connections PgBouncer holds for `database`.
    pub async fn servers(&self, database: &str) -> usize {
        self.count("SHOW SERVERS", database).await
    }

    /// Rows of a console listing for `database` (the console speaks only the
    /// simple protocol).
    async fn count(&self, listing: &'static str, database: &str) -> usize {
        use sqlx::{Connection, Row};
        let options = PgConnectOptions::new()
            .host("127.0.0.1")
            .port(self.address.port())
            .username(opreg_embedded::SUPERUSER)
            .database("pgbouncer")
            .extra_float_digits(None);
        let mut console = PgConnection::connect_with(&options).await.unwrap();
        let rows = sqlx::raw_sql(listing)
            .fetch_all(&mut console)
            .await
            .unwrap();
        let _ = console.close().await;
        rows.iter()
            .filter(|row| row.try_get::<String, _>("database").ok().as_deref() == Some(database))
            .count()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn make_writable_by_all(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}

/// The name of the user owning the cluster's directory.
fn cluster_user(root: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata(root).unwrap().uid();
    let output = Command::new("id")
        .args(["-nu", &uid.to_string()])
        .output()
        .expect("id runs");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}
