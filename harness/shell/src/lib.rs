#![warn(unreachable_pub)]
//! A small POSIX shell subset over in-memory volumes: what `kubectl exec` runs inside the
//! emulated cluster's containers. It knows nothing of Kubernetes: its host (the emulator, the
//! programs the models run) hands it mounts and hooks.
//!
//! Where to start: [`run`] takes an exec argv, its stdin, environment, working directory,
//! [`Mounts`] (in-memory [`Volume`]s at paths) and [`ShellHooks`] (clock, `kill`, `/proc`;
//! [`DefaultHooks`] for none), and returns an [`ExecOutput`]. [`can_run`] says whether an
//! argv is one the shell can run at all. The modules: `parse.rs` (the grammar), `interp/`
//! (expansion, redirections, control flow, and the commands in `interp/builtins.rs`), `fs.rs`
//! (the directory tree and mount resolution), `glob.rs`, `arith.rs`, `hooks.rs`, `error.rs`.
//!
//! `sh -c SCRIPT` (and `/bin/sh`, `dash`) interprets a script; any other argv[0] runs one
//! builtin directly without expansion.
//!
//! The language follows dash for the subset it covers: `;`/newline/`&&`/`||` lists, `!`,
//! pipelines, `{ }` and `( )`, `if`/`while`/`until`/`for`/`case`, `break`/`continue`,
//! single/double/backslash quoting, `#` comments, `$VAR ${VAR} ${VAR:-w} ${VAR:=w}
//! ${VAR:+w} ${VAR:?w} ${#VAR} ${VAR%p} ${VAR%%p} ${VAR#p} ${VAR##p}`, `$0`..`$9`, `${10}`,
//! `$# $@ "$@" $* $? $$ $-` (`$$` is a fixed 100), `$(...)`, backquotes, `$((...))` (64-bit
//! integers, no assignment operators), field splitting of unquoted expansions on `$IFS`, and
//! redirections `< > >> >| <> N>&M N<&M` on fds 0-2 (`/dev/null`, `/dev/stdout`,
//! `/dev/stderr` are special-cased; other fds are opened, so files get created, but ignored).
//! `case` and the `%`/`#` operators use `*`, `?`, `[...]` patterns.
//!
//! Commands: `echo printf cat test [ mkdir rm ls touch sleep kill exit true false : date wc
//! tr grep head tail cd pwd export unset env printenv read set shift eval break continue sh
//! dash` (`tr` and `grep` as in `interp/text.rs`),
//! and a path to a script file in a volume (run by `sh`). Anything else is `NAME: not found`,
//! status 127.
//!
//! Not supported, and reported as syntax errors rather than misbehaving silently: `&`
//! background jobs, here-documents, function definitions. Not done at all: tilde expansion
//! (`~` stays literal), `set -u`, traps, `exec`. Pathname expansion is done (`/proc/[0-9]*`):
//! an unquoted `*`, `?` or `[...]` in a field expands to the sorted matching paths, or stays
//! as it is when nothing matches.
//!
//! Model and deliberate differences from a real shell:
//! - Output is buffered: a pipeline runs its commands one after another, each reading the
//!   whole output of the previous one, so `sleep 1 | sleep 1` takes 2 s of (virtual) time.
//!   Each pipeline element and `( )` runs as a subshell (variable changes do not escape).
//! - Redirection failures (e.g. `> /ro/file` on a read-only mount) print
//!   `sh: 1: cannot create /ro/file: Read-only file system` and give status 2, as dash does
//!   (bash and busybox give 1). Utilities report their own errors with status 1
//!   (`touch /ro/x` → `touch: cannot touch '/ro/x': Read-only file system`).
//! - `echo` interprets no backslash escapes (dash's does); only a leading `-n` is an option.
//! - When `sh` reads its script from stdin, the whole stdin is the script and the commands
//!   get an empty stdin.
//! - A loop that runs a million commands without sleeping is stopped with status 2: in paused
//!   time nothing else could ever run or time it out. Nesting (compound commands,
//!   substitutions, `eval`, nested `sh`) is bounded so that no input can overflow the stack;
//!   the limit (about 30 levels) is far above what scripts use.
//! - Nothing blocks except `sleep`, which uses `tokio::time::sleep` and so follows paused
//!   time exactly. Dropping the future stops the script where it is.

mod arith;
mod error;
mod fs;
mod glob;
mod hooks;
mod interp;
mod parse;

pub use error::{FsError, KillError, ReadError};
pub use fs::{Mounts, Volume};
pub use hooks::{DefaultHooks, ShellHooks};
pub use interp::{ExecOutput, can_run, run};
