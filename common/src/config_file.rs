//! A config file read as flags, for any binary whose settings are `clap` flags: TOML whose
//! keys are the long flags' names with `_` for `-` (`http_addr = "0.0.0.0:8080"`,
//! `allow_relay_net = ["10.0.0.0/8"]`, `demo_page = false`). The file is read as if its
//! keys were flags given before the command line's own, so clap validates both the same
//! way, and a flag on the command line replaces the file's key (a list too); each setting
//! is therefore declared once, as its flag. `--print-config` writes the effective
//! configuration in the same form, defaults filled in ([`effective_config`]), which loads
//! back to the same. Secrets never appear: they come only from files and the environment.
//!
//! No I/O: the caller reads the file and the environment.

use std::collections::BTreeSet;
use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue};
use clap::{ArgAction, ArgMatches, Command, CommandFactory, FromArgMatches};

/// A configuration error: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: `{field}`: {reason}")]
pub struct ConfigError {
    /// The field (file key or flag name without dashes) that is wrong.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Keys the file may not set: what selects the file itself, and what is not configuration.
const NOT_FILE_KEYS: [&str; 4] = ["config", "print_config", "help", "version"];

/// The path the command line names with `--config FILE`, `--config=FILE`, `-c FILE`,
/// `-c=FILE` or `-cFILE`, else
/// `from_env` (the value of the binary's config variable, an empty one counting as
/// unset); read before parsing, since the file's keys join the parse.
pub fn config_path(args: &[OsString], from_env: Option<OsString>) -> Option<OsString> {
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        if arg == "--config" || arg == "-c" {
            return rest.next().cloned();
        }
        let Some(arg) = arg.to_str() else { continue };
        // `--config=FILE`, `-c=FILE` and `-cFILE`, as clap reads them.
        if let Some(path) = arg.strip_prefix("--config=") {
            return Some(path.into());
        }
        if let Some(path) = arg.strip_prefix("-c").filter(|p| !p.is_empty()) {
            return Some(path.strip_prefix('=').unwrap_or(path).into());
        }
    }
    from_env.filter(|v| !v.is_empty())
}

/// The long flags the command line gives itself (`--name` or `--name=value`).
fn flags_given(args: &[OsString]) -> BTreeSet<String> {
    args.iter()
        .skip(1)
        .filter_map(|a| a.to_str()?.strip_prefix("--"))
        .map(|a| a.split_once('=').map_or(a, |(name, _)| name).to_string())
        .collect()
}

/// A key that a file may once have used, its name now, and how its value is written now.
pub type RenamedKey = (&'static str, &'static str, &'static str);

/// The file's keys as flags for `command`, leaving out every key the command line (`args`)
/// gives itself. An error names the key and says why; a key in `renamed` is refused with
/// its new name.
pub fn file_as_flags(
    command: &Command,
    text: &str,
    args: &[OsString],
    renamed: &[RenamedKey],
) -> Result<Vec<OsString>, ParseError> {
    let table: toml::Table = toml::from_str(text).map_err(|e: toml::de::Error| {
        ParseError::Unreadable(format!("not TOML: {}", e.message().trim()))
    })?;
    let bad = |key: &str, reason: String| {
        ParseError::File(ConfigError {
            field: key.to_string(),
            reason,
        })
    };
    let given = flags_given(args);
    let mut flags = Vec::new();
    for (key, value) in &table {
        let long = key.replace('_', "-");
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()))
            .filter(|_| !NOT_FILE_KEYS.contains(&key.as_str()))
            .ok_or_else(|| match renamed.iter().find(|(old, _, _)| old == key) {
                Some((_, new, form)) => bad(key, format!("renamed `{new}`: {form}")),
                None => bad(
                    key,
                    "not a key (the keys are the flags' long names, `_` for `-`)".into(),
                ),
            })?;
        if given.contains(&long) {
            continue;
        }
        let values = match value {
            toml::Value::Array(items) => items.iter().collect(),
            single => vec![single],
        };
        if values.len() != 1 && !matches!(arg.get_action(), ArgAction::Append) {
            return Err(bad(key, "takes one value, not a list".into()));
        }
        for value in values {
            let text = match value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
                    value.to_string()
                }
                _ => {
                    return Err(bad(key, "a string, number, boolean or list of them".into()));
                }
            };
            if matches!(arg.get_action(), ArgAction::SetTrue) {
                match value {
                    toml::Value::Boolean(true) => flags.push(format!("--{long}").into()),
                    toml::Value::Boolean(false) => {}
                    _ => return Err(bad(key, "true or false".into())),
                }
            } else {
                flags.push(format!("--{long}={text}").into());
            }
        }
    }
    Ok(flags)
}

/// What a command line and its config file gave.
#[derive(Debug)]
pub struct Parsed<C> {
    /// The options, file and command line merged.
    pub options: C,
    /// The effective configuration as a config file ([`effective_config`]).
    pub effective: String,
}

/// Why a command line and its config file did not parse.
#[derive(Debug)]
pub enum ParseError {
    /// The file cannot be read or is not TOML: why.
    Unreadable(String),
    /// One of the file's keys is at fault: the key and why.
    File(ConfigError),
    /// The command line is (or it asked for help or the version): clap's error.
    CommandLine(clap::Error),
}

impl ParseError {
    /// The error as a [`ConfigError`] naming the key (or flag, `_` for `-`) at fault.
    pub fn into_config_error(self) -> ConfigError {
        match self {
            ParseError::Unreadable(reason) => ConfigError {
                field: "config".into(),
                reason,
            },
            ParseError::File(error) => error,
            ParseError::CommandLine(error) => config_error_of(&error),
        }
    }
}

/// A clap error as a [`ConfigError`] naming the flag it is about (`config` when none).
fn config_error_of(error: &clap::Error) -> ConfigError {
    let key = match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg
            .trim_start_matches("--")
            .split([' ', '='])
            .next()
            .unwrap_or_default()
            .replace('-', "_"),
        _ => "config".into(),
    };
    let reason = error.to_string();
    let reason = reason.lines().next().unwrap_or_default();
    ConfigError {
        field: key,
        reason: reason.trim_start_matches("error: ").to_string(),
    }
}

/// Parses `args` (the program name first) for `C`, with the config file's `text` (if one
/// is named) read as flags before the command line's own, so that a flag replaces the
/// file's key. A value clap refuses is the file's fault when the command line alone does
/// not fail the same way; the error then names the key.
pub fn parse<C: CommandFactory + FromArgMatches>(
    text: Option<&str>,
    args: &[OsString],
    renamed: &[RenamedKey],
) -> Result<Parsed<C>, ParseError> {
    let command = C::command();
    let mut full: Vec<OsString> = args[..1.min(args.len())].to_vec();
    if let Some(text) = text {
        full.extend(file_as_flags(&command, text, args, renamed)?);
    }
    full.extend(args.iter().skip(1).cloned());
    let matches = command
        .clone()
        .try_get_matches_from(&full)
        .map_err(|error| {
            // The command line's own fault when parsing it alone fails the same way, about
            // the same flag.
            let fault = |e: &clap::Error| {
                let flag = e.get(ContextKind::InvalidArg).map(|v| v.to_string());
                (e.kind(), flag)
            };
            let own = command.clone().try_get_matches_from(args).err();
            if text.is_none() || own.as_ref().map(fault) == Some(fault(&error)) {
                return ParseError::CommandLine(error);
            }
            ParseError::File(config_error_of(&error))
        })?;
    let options = C::from_arg_matches(&matches).map_err(ParseError::CommandLine)?;
    Ok(Parsed {
        options,
        effective: effective_config(&command, &matches),
    })
}

/// The effective configuration of a parsed command line as a config file: every key with a
/// value (given, from the file, or the default), in the order `--help` lists them; a key
/// with none is a comment.
pub fn effective_config(command: &Command, matches: &ArgMatches) -> String {
    let mut out = String::from(
        "# The effective configuration: every key, defaults filled in; secrets are never \
         printed (they come only from files and the environment).\n",
    );
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let key = long.replace('-', "_");
        if NOT_FILE_KEYS.contains(&key.as_str()) {
            continue;
        }
        let id = arg.get_id().as_str();
        let raw: Vec<String> = matches
            .get_raw(id)
            .map(|values| values.map(|v| v.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let value = match arg.get_action() {
            ArgAction::SetTrue => toml::Value::Boolean(matches.get_flag(id)),
            ArgAction::Append => toml::Value::Array(raw.iter().map(|v| toml_scalar(v)).collect()),
            _ => match raw.first() {
                Some(v) => toml_scalar(v),
                None => {
                    out.push_str(&format!("# {key}: not set\n"));
                    continue;
                }
            },
        };
        out.push_str(&format!("{key} = {value}\n"));
    }
    out
}

/// A flag's value as TOML: a number or boolean when it reads as one and prints back the
/// same (`007` stays the string it was), else a string.
fn toml_scalar(raw: &str) -> toml::Value {
    if let Ok(n) = raw.parse::<i64>()
        && n.to_string() == raw
    {
        return toml::Value::Integer(n);
    }
    match raw {
        "true" => toml::Value::Boolean(true),
        "false" => toml::Value::Boolean(false),
        _ => toml::Value::String(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> Command {
        Command::new("t")
            .arg(clap::Arg::new("bind").long("bind"))
            .arg(clap::Arg::new("workers").long("workers").default_value("1"))
            .arg(
                clap::Arg::new("nets")
                    .long("allow-net")
                    .action(ArgAction::Append),
            )
            .arg(
                clap::Arg::new("direct")
                    .long("direct")
                    .action(ArgAction::SetTrue),
            )
            .arg(clap::Arg::new("config").long("config"))
    }

    fn args(list: &[&str]) -> Vec<OsString> {
        std::iter::once("t")
            .chain(list.iter().copied())
            .map(OsString::from)
            .collect()
    }

    #[test]
    fn keys_become_flags_and_the_command_line_replaces_them() {
        let text = "bind = \"1.2.3.4:5\"\nworkers = 2\nallow_net = [\"10.0.0.0/8\", \"::1/128\"]\ndirect = true\n";
        let flags = file_as_flags(&command(), text, &args(&["--workers=3"]), &[]).unwrap();
        assert_eq!(
            flags,
            [
                "--allow-net=10.0.0.0/8",
                "--allow-net=::1/128",
                "--bind=1.2.3.4:5",
                "--direct"
            ]
            .map(OsString::from)
        );
        let flags = file_as_flags(
            &command(),
            "allow_net = [\"a\"]",
            &args(&["--allow-net", "b"]),
            &[],
        );
        assert_eq!(
            flags.unwrap(),
            Vec::<OsString>::new(),
            "a list on the command line replaces the file's"
        );
    }

    #[test]
    fn bad_keys_are_named() {
        let cases = [
            ("bnd = \"x\"", "bnd", "not a key"),
            ("config = \"x\"", "config", "not a key"),
            ("bind = [\"a\", \"b\"]", "bind", "takes one value"),
            ("direct = \"yes\"", "direct", "true or false"),
            ("bind = { a = 1 }", "bind", "a string, number"),
            ("bind = ", "config", "not TOML"),
            ("binds = \"x\"", "binds", "renamed `bind`: one address"),
        ];
        let renamed = [("binds", "bind", "one address")];
        for (text, key, expected) in cases {
            let error = file_as_flags(&command(), text, &args(&[]), &renamed)
                .unwrap_err()
                .into_config_error();
            assert_eq!(error.field, key, "{text}: {error}");
            assert!(error.reason.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn the_effective_configuration_loads_back_to_itself() {
        let first = command()
            .try_get_matches_from(args(&[
                "--bind",
                "1.2.3.4:5",
                "--allow-net",
                "a",
                "--direct",
            ]))
            .unwrap();
        let printed = effective_config(&command(), &first);
        assert!(printed.contains("workers = 1\n"), "{printed}");
        assert_eq!(toml_scalar("007"), toml::Value::String("007".into()));
        assert_eq!(toml_scalar("-7"), toml::Value::Integer(-7));
        assert!(printed.contains("allow_net = [\"a\"]\n"), "{printed}");
        assert!(!printed.contains("config =") && !printed.contains("print_config"));
        let flags = file_as_flags(&command(), &printed, &args(&[]), &[]).unwrap();
        let again = command()
            .try_get_matches_from(std::iter::once(OsString::from("t")).chain(flags))
            .unwrap();
        assert_eq!(effective_config(&command(), &again), printed);
    }

    #[derive(clap::Parser, Debug)]
    struct Options {
        #[arg(long, default_value_t = 1)]
        workers: u8,
        #[arg(long)]
        bind: Option<String>,
    }

    #[test]
    fn a_bad_value_is_the_file_s_fault_only_when_it_came_from_the_file() {
        let parsed = parse::<Options>(Some("workers = 3"), &args(&[]), &[]).unwrap();
        assert_eq!(parsed.options.workers, 3);
        assert!(
            parsed.effective.contains("workers = 3\n"),
            "{}",
            parsed.effective
        );
        let flag_wins = parse::<Options>(Some("workers = 3"), &args(&["--workers", "4"]), &[]);
        assert_eq!(flag_wins.unwrap().options.workers, 4);
        match parse::<Options>(Some("workers = 300"), &args(&[]), &[]) {
            Err(ParseError::File(e)) => assert_eq!(e.field, "workers", "{e}"),
            other => panic!("the file's value, the file's fault: {other:?}"),
        }
        // Both bad: the file's value is named as the file's (clap stops at the first).
        match parse::<Options>(Some("workers = 300"), &args(&["--bind"]), &[]) {
            Err(ParseError::File(e)) => assert_eq!(e.field, "workers", "{e}"),
            other => panic!("the file's value, the file's fault: {other:?}"),
        }
        match parse::<Options>(Some("bind = \"x\""), &args(&["--workers", "300"]), &[]) {
            Err(ParseError::CommandLine(e)) => {
                assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
                let e = ParseError::CommandLine(e).into_config_error();
                assert_eq!(e.field, "workers", "{e}");
            }
            other => panic!("the command line's value, its own fault: {other:?}"),
        }
        match parse::<Options>(None, &args(&["--help"]), &[]) {
            Err(ParseError::CommandLine(e)) => {
                assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
            }
            other => panic!("help is clap's to print: {other:?}"),
        }
    }

    #[test]
    fn the_path_comes_from_the_command_line_first() {
        let env = || Some(OsString::from("env.toml"));
        assert_eq!(
            config_path(&args(&["--config", "a.toml"]), env()),
            Some("a.toml".into())
        );
        assert_eq!(
            config_path(&args(&["--config=b.toml"]), env()),
            Some("b.toml".into())
        );
        assert_eq!(config_path(&args(&["--bind", "x"]), env()), env());
        for attached in ["-cc.toml", "-c=c.toml"] {
            assert_eq!(
                config_path(&args(&[attached]), env()),
                Some("c.toml".into())
            );
        }
        assert_eq!(
            config_path(&args(&["--bind", "x"]), Some(OsString::new())),
            None,
            "an empty variable is unset"
        );
    }
}
