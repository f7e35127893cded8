//! The call log: one line per call, flushed as it is written.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

#[derive(Debug)]
pub(crate) struct CallLog {
    file: Mutex<File>,
    lines: Mutex<Vec<String>>,
}

impl CallLog {
    pub(crate) fn create(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            file: Mutex::new(File::create(path)?),
            lines: Mutex::default(),
        })
    }

    pub(crate) fn write(&self, line: String) {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        // A log that cannot be written fails the scenario by its missing lines.
        let _ = writeln!(file, "{line}").and_then(|()| file.flush());
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(line);
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
