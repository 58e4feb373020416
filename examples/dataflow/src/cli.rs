//! Command-line options of `dataflow`, parsed by hand: there are only four, and the
//! example should depend on nothing but the two emitter libraries.

pub const HELP: &str = "\
dataflow: opscope's example workload, trains a small MLP as a graph of 23 ops on worker threads.
Every op is an ITT task, every step an NVTX range; at exit it prints a JSON line counting them.

Usage: dataflow [OPTIONS]

Options:
  --steps N       training steps to run [default: 20]
  --threads N     worker threads, at least 1 [default: 2]
  --quiet         print nothing (no JSON summary)
  --exit-code N   exit with status N (0-255) once done [default: 0]
  -h, --help      print this help
";

#[derive(Debug, PartialEq, Eq)]
pub struct Options {
    pub steps: usize,
    pub threads: usize,
    pub quiet: bool,
    pub exit_code: u8,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            steps: 20,
            threads: 2,
            quiet: false,
            exit_code: 0,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Run(Options),
    Help,
}

fn number<T: std::str::FromStr>(flag: &str, value: Option<String>) -> Result<T, String> {
    let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
    value
        .parse()
        .map_err(|_| format!("invalid value for {flag}: {value:?}"))
}

/// Parses the arguments after the program name. Accepts `--flag N` and `--flag=N`.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut options = Options::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => (arg, None),
        };
        let takes_value = matches!(flag.as_str(), "--steps" | "--threads" | "--exit-code");
        if inline.is_some() && !takes_value {
            return Err(format!("{flag} takes no value"));
        }
        let value = if takes_value {
            inline.or_else(|| args.next())
        } else {
            None
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--quiet" => options.quiet = true,
            "--steps" => options.steps = number(&flag, value)?,
            "--threads" => {
                options.threads = number(&flag, value)?;
                if options.threads == 0 {
                    return Err("--threads must be at least 1".to_owned());
                }
            }
            "--exit-code" => options.exit_code = number(&flag, value)?,
            _ => return Err(format!("unexpected argument {flag:?}")),
        }
    }
    Ok(Command::Run(options))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(args: &[&str]) -> Result<Command, String> {
        parse(args.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn defaults() {
        assert_eq!(parse_str(&[]), Ok(Command::Run(Options::default())));
    }

    #[test]
    fn all_options() {
        let parsed = parse_str(&["--steps", "3", "--threads=4", "--quiet", "--exit-code", "7"]);
        assert_eq!(
            parsed,
            Ok(Command::Run(Options {
                steps: 3,
                threads: 4,
                quiet: true,
                exit_code: 7,
            }))
        );
        assert_eq!(parse_str(&["--steps", "1", "-h"]), Ok(Command::Help));
        assert_eq!(parse_str(&["--help"]), Ok(Command::Help));
    }

    #[test]
    fn errors() {
        for bad in [
            &["--steps"][..],
            &["--steps", "x"],
            &["--threads", "0"],
            &["--exit-code", "256"],
            &["--exit-code=-1"],
            &["--quiet=1"],
            &["--bogus"],
            &["extra"],
        ] {
            assert!(parse_str(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
