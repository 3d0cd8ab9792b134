//! How stockd's command line reads to a person: help wrapped to the terminal (at most
//! [`HELP_WIDTH_MAX`] columns), `[env: NAME]` without an empty `=` when the variable is unset,
//! and a "similar subcommand" tip where clap's own suggestions find none (`stockd hold gte`).
//!
//! This module only shapes what clap prints; it never changes what a command line means.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// The widest help is printed, whatever the terminal: longer lines are hard to read. A narrower
/// terminal (or `COLUMNS` when stdout is not one) wraps narrower.
pub const HELP_WIDTH_MAX: usize = 100;

/// `command` as stockd shows it: wrapped help, and unset variables without their `=`.
pub fn shaped(command: clap::Command) -> clap::Command {
    hide_unset_env_values(command.max_term_width(HELP_WIDTH_MAX))
}

/// clap writes `[env: NAME=VALUE]`, which for an unset variable is `[env: NAME=]`: such an
/// argument shows only the name. A variable that is set still shows its value (secrets are
/// hidden by their own arguments).
fn hide_unset_env_values(command: clap::Command) -> clap::Command {
    command
        .mut_args(|arg| {
            let unset = arg
                .get_env()
                .is_some_and(|name| std::env::var_os(name).is_none_or(|value| value.is_empty()));
            if unset {
                arg.hide_env_values(true)
            } else {
                arg
            }
        })
        .mut_subcommands(hide_unset_env_values)
}

/// Adds the subcommands close to a mistyped one to clap's error, when clap suggested none: its
/// measure (Jaro, above 0.7) misses a swap of two letters in a short name (`gte` for `get`).
pub fn with_suggestions(
    mut error: clap::Error,
    root: &clap::Command,
    args: &[OsString],
) -> clap::Error {
    if error.kind() != ErrorKind::InvalidSubcommand {
        return error;
    }
    if let Some(ContextValue::Strings(suggested)) = error.get(ContextKind::SuggestedSubcommand) {
        if !suggested.is_empty() {
            return error;
        }
    }
    let Some(ContextValue::String(typed)) = error.get(ContextKind::InvalidSubcommand) else {
        return error;
    };
    let typed = typed.clone();
    // The command the mistyped name was given to: follow the subcommands named before it.
    let mut parent = root;
    for arg in args.iter().skip(1) {
        let Some(arg) = arg.to_str() else { break };
        if arg == typed {
            break;
        }
        if let Some(sub) = parent.find_subcommand(arg) {
            parent = sub;
        }
    }
    let close: Vec<String> = parent
        .get_subcommands()
        .map(|sub| sub.get_name())
        .filter(|name| is_close(&typed, name))
        .map(str::to_owned)
        .collect();
    if !close.is_empty() {
        error.insert(
            ContextKind::SuggestedSubcommand,
            ContextValue::Strings(close),
        );
    }
    error
}

/// Whether `typed` is a likely typo of `name`: at most one edit (a letter added, removed,
/// replaced, or two neighbours swapped) per three letters of the name, and at least one.
fn is_close(typed: &str, name: &str) -> bool {
    edits(typed, name) <= (name.chars().count() / 3).max(1)
}

/// The fewest edits from `a` to `b`, counting a swap of neighbours as one (optimal string
/// alignment distance).
fn edits(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[i][j]: edits from a[..i] to b[..j]; only the last three rows are needed.
    let mut before = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let replace = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + replace);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            current[j] = best;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_count_a_swap_as_one() {
        assert_eq!(edits("gte", "get"), 1);
        assert_eq!(edits("get", "get"), 0);
        assert_eq!(edits("", "get"), 3);
        assert_eq!(edits("relase", "release"), 1);
        assert_eq!(edits("reserv", "reserve"), 1);
        assert_eq!(edits("lsit", "list"), 1);
        assert_eq!(edits("pool", "lock"), 3);
        assert!(is_close("gte", "get"));
        assert!(is_close("rsetock", "restock"));
        assert!(!is_close("gxx", "get"));
        assert!(!is_close("hold", "lock"));
    }
}
