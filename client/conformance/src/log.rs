//! The call log: one line per call, flushed as it is written.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(Debug)]
pub(crate) struct CallLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl CallLog {
    pub(crate) fn create(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            path: path.to_owned(),
            file: Mutex::new(File::create(path)?),
        })
    }

    pub(crate) fn write(&self, line: String) {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        // A log that cannot be written fails the scenario by its missing lines.
        let _ = writeln!(file, "{line}").and_then(|()| file.flush());
    }

    /// Every line written so far, read back from the file.
    pub(crate) fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}
