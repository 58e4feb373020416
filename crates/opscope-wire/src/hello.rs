//! The greeting a recorded process sends first: who it is, in JSON. The injected
//! library writes it with [`Hello::to_json`] (no serde there); the agent reads it with
//! serde (feature `serde`), into this same type.

/// Who a process is, as it tells the agent when it connects.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
pub struct Hello {
    /// [`Hello::VERSION`] for what this crate writes.
    pub version: u32,
    pub pid: u32,
    #[cfg_attr(feature = "serde", serde(default))]
    pub ppid: u32,
    /// The job's name and where it came from (`--job`, `SLURM_JOB_ID`, …, `session`).
    pub job: String,
    #[cfg_attr(feature = "serde", serde(default))]
    pub job_source: String,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub command: String,
    #[cfg_attr(feature = "serde", serde(default))]
    pub session: String,
    /// The process's file in the session, none with `--live-only`.
    pub file: Option<String>,
    /// Sent by a sampler outside the process (`opscope attach`, `record --pid`): `pid`
    /// is the process it observes, not the sender, which the agent lets in only where
    /// the sender may read that process.
    #[cfg_attr(feature = "serde", serde(default))]
    pub observed: bool,
}

impl Hello {
    pub const VERSION: u32 = 1;

    /// The greeting as the agent reads it: a JSON object, absent options left out.
    pub fn to_json(&self) -> String {
        let mut out = format!("{{\"version\":{}", self.version);
        let mut field = |key: &str, value: String| {
            out.push_str(&format!(",\"{key}\":{value}"));
        };
        field("pid", self.pid.to_string());
        field("ppid", self.ppid.to_string());
        field("job", json_string(&self.job));
        field("job_source", json_string(&self.job_source));
        for (key, value) in [
            ("rank", self.rank),
            ("local_rank", self.local_rank),
            ("world_size", self.world_size),
        ] {
            if let Some(v) = value {
                field(key, v.to_string());
            }
        }
        field("command", json_string(&self.command));
        field("session", json_string(&self.session));
        if let Some(file) = &self.file {
            field("file", json_string(file));
        }
        if self.observed {
            field("observed", "true".into());
        }
        out.push('}');
        out
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON as the agent of any version reads it: version first, absent options
    /// left out, control characters as \u escapes.
    #[test]
    fn hello_is_json_with_every_text_escaped() {
        let hello = Hello {
            version: Hello::VERSION,
            pid: 7,
            ppid: 1,
            job: "a \"b\"\\c\n".into(),
            job_source: "--job".into(),
            rank: Some(1),
            command: "python\u{1}".into(),
            ..Hello::default()
        };
        let json = hello.to_json();
        assert!(
            json.starts_with("{\"version\":1,\"pid\":7,\"ppid\":1,"),
            "{json}"
        );
        assert!(json.contains(r#""job":"a \"b\"\\c\u000a""#), "{json}");
        assert!(json.contains(r#""rank":1,"#), "{json}");
        assert!(!json.contains("local_rank"), "{json}");
        assert!(json.contains(r#""command":"python\u0001""#), "{json}");
    }

    #[cfg(feature = "serde")]
    /// What the recorder writes by hand is what the agent reads: every field, every
    /// text escaped (quotes, backslashes, control characters, non-ASCII), options
    /// present and absent.
    #[test]
    fn the_hand_written_greeting_reads_back_whole() {
        let hello = Hello {
            version: Hello::VERSION,
            pid: 7,
            ppid: 1,
            job: "j \"x\" \\ \u{1}".into(),
            job_source: "--job".into(),
            rank: Some(1),
            local_rank: None,
            world_size: Some(2),
            command: "python t.py é\n\ttab".into(),
            session: "/s".into(),
            file: Some("opscope-7.pftrace".into()),
            observed: true,
        };
        let read: Hello = serde_json::from_str(&hello.to_json()).unwrap();
        assert_eq!(read, hello);
        let bare = Hello {
            file: None,
            observed: false,
            rank: None,
            world_size: None,
            ..hello
        };
        let read: Hello = serde_json::from_str(&bare.to_json()).unwrap();
        assert_eq!(read, bare);
    }
}
