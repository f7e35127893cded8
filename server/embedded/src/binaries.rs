//! Finding PostgreSQL's server binaries, which distributions often keep
//! outside PATH.

use std::env;
use std::path::{Path, PathBuf};

/// The first directory holding both `initdb` and `postgres`: `OPREG_PG_BIN_DIR`,
/// then PATH, then the usual install locations, newest version first.
pub fn find_bin_dir() -> Option<PathBuf> {
    let explicit = env::var_os("OPREG_PG_BIN_DIR").map(PathBuf::from);
    let on_path = env::var_os("PATH")
        .map(|path| env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    explicit
        .into_iter()
        .chain(on_path)
        .chain(versioned_dirs())
        .chain(
            [
                "/usr/local/pgsql/bin",
                "/opt/homebrew/bin",
                "/usr/local/bin",
            ]
            .map(PathBuf::from),
        )
        .find(|dir| has_server_binaries(dir))
}

fn has_server_binaries(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("postgres").is_file()
}

/// Debian/Ubuntu (`/usr/lib/postgresql/N/bin`), RHEL (`/usr/pgsql-N/bin`) and
/// Homebrew (`.../opt/postgresql@N/bin`) layouts, highest version first.
fn versioned_dirs() -> Vec<PathBuf> {
    let layouts: [(&str, &str, &str); 4] = [
        ("/usr/lib/postgresql", "", "bin"),
        ("/usr", "pgsql-", "bin"),
        ("/opt/homebrew/opt", "postgresql@", "bin"),
        ("/usr/local/opt", "postgresql@", "bin"),
    ];
    let mut found: Vec<(u32, PathBuf)> = Vec::new();
    for (parent, prefix, bin) in layouts {
        let Ok(entries) = std::fs::read_dir(parent) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(version) = name.strip_prefix(prefix) else {
                continue;
            };
            if let Ok(major) = version.split('.').next().unwrap_or_default().parse::<u32>() {
                found.push((major, entry.path().join(bin)));
            }
        }
    }
    found.sort_by_key(|(major, _)| std::cmp::Reverse(*major));
    found.into_iter().map(|(_, dir)| dir).collect()
}
