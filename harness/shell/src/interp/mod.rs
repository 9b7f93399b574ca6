//! The interpreter: a [`Shell`]'s state (variables, file descriptors, captured output), word
//! expansion, redirections, pipelines and compound commands, and [`run`], the way in. The
//! commands themselves are in `builtins.rs` (`tr` and `grep` in `text.rs`); the language and
//! its deliberate differences from dash are in the crate docs.

mod builtins;
#[cfg(test)]
mod tests;
mod text;

use std::collections::{BTreeMap, BTreeSet};

use futures::future::BoxFuture;

use crate::arith;
use crate::error::FsError;
use crate::fs::{self, Mounts};
use crate::glob;
use crate::hooks::ShellHooks;
use crate::parse::{
    self, AndOr, CmdKind, Command, List, ParamOp, Parser, Part, Pipeline, Redir, RedirOp, Word,
};

/// What an exec produced: its standard output and error, and its exit code.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i32,
}

/// Run one command the way the container runtime would run an exec argv: `argv[0]` is looked
/// up among the builtins (`sh` included, so ["sh","-c","..."] and ["/bin/sh","-c","..."]
/// work; a leading directory in argv[0] is ignored), `stdin` is the exec's standard input,
/// `env` the environment (available as $VAR), `workdir` the initial directory.
pub async fn run(
    argv: &[String],
    stdin: &[u8],
    env: &BTreeMap<String, String>,
    workdir: &str,
    mounts: &Mounts,
    hooks: &dyn ShellHooks,
) -> ExecOutput {
    let mut sh = Shell::new(mounts, hooks, env, workdir, stdin);
    let exit_code = match argv.split_first() {
        None => {
            sh.stderr
                .extend_from_slice(b"OCI runtime exec failed: exec failed: no command given\n");
            127
        }
        Some((name, args)) if is_shell(name) => sh.invoke_sh(name, args).await,
        Some(_) => {
            sh.direct = true;
            flow_status(sh.run_cmd(argv).await)
        }
    };
    ExecOutput {
        stdout: sh.stdout,
        stderr: sh.stderr,
        exit_code,
    }
}

/// The commands the shell runs itself (argv[0] taken by its base name).
const COMMANDS: &[&str] = &[
    ":", "true", "false", "echo", "printf", "cat", "test", "[", "mkdir", "rm", "ls", "touch",
    "sleep", "kill", "date", "wc", "tr", "grep", "head", "tail", "cd", "pwd", "export", "unset",
    "env", "printenv", "read", "set", "shift", "exit", "break", "continue", "eval", "sh", "dash",
];

/// Whether [`run`] can run this exec argv: argv[0] is one of the shell's commands or a script
/// file in the mounts. Anything else is an executable of the image the shell knows nothing of
/// (running it would say `not found`).
pub fn can_run(argv: &[String], mounts: &Mounts) -> bool {
    let Some(name) = argv.first() else {
        return false;
    };
    if COMMANDS.contains(&base_name(name)) {
        return true;
    }
    name.starts_with('/')
        && matches!(
            mounts.stat(&fs::components(name)),
            Ok(fs::Kind::File { .. })
        )
}

fn is_shell(name: &str) -> bool {
    matches!(base_name(name), "sh" | "dash")
}

fn base_name(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// Commands run without sleeping before the shell gives up (see the module docs).
const BUSY_LIMIT: u64 = 1_000_000;
/// Nested `sh`/`eval`/script invocations allowed.
const CALL_DEPTH_LIMIT: u32 = 8;
/// Nested command lists being run at once (each costs stack: a debug build overflows a 2 MiB
/// thread stack, tokio's default, somewhere above 120).
const NESTING_LIMIT: u32 = 40;
/// Output kept per stream; more is dropped rather than exhausting memory.
const OUTPUT_LIMIT: usize = 64 << 20;

/// A non-local exit out of the command being run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Exit(i32),
    Break(u32),
    Continue(u32),
}

type Status = Result<i32, Flow>;

/// The status a subshell reports for how its body ended.
fn flow_status(result: Status) -> i32 {
    match result {
        Ok(status) | Err(Flow::Exit(status)) => status,
        Err(Flow::Break(_) | Flow::Continue(_)) => 0,
    }
}

/// Shell state that a subshell copies and then throws away.
#[derive(Clone)]
struct Vars {
    map: BTreeMap<String, String>,
    exported: BTreeSet<String>,
    positional: Vec<String>,
    arg0: String,
    cwd: String,
    status: i32,
    errexit: bool,
    xtrace: bool,
}

/// Where file descriptor 1 or 2 currently writes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Sink {
    Stdout,
    Stderr,
    /// A pipe or command substitution being captured (index into `Shell::captures`).
    Capture(usize),
    /// Appends to a file (already created or truncated when the redirection was made).
    File(Vec<String>),
    Null,
}

/// Standard input: shared by the commands that read it in turn.
#[derive(Default)]
struct Input {
    data: Vec<u8>,
    pos: usize,
}

impl Input {
    fn new(data: Vec<u8>) -> Self {
        Input { data, pos: 0 }
    }

    fn read_all(&mut self) -> Vec<u8> {
        let rest = self.data.get(self.pos..).unwrap_or_default().to_vec();
        self.pos = self.data.len();
        rest
    }

    /// One line including its newline, or None at end of input.
    fn read_line(&mut self) -> Option<Vec<u8>> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        if rest.is_empty() {
            return None;
        }
        let len = rest
            .iter()
            .position(|b| *b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        let line = rest[..len].to_vec();
        self.pos += len;
        Some(line)
    }
}

/// Redirections in force before a command's own, restored when it ends.
struct SavedFds {
    fd1: Sink,
    fd2: Sink,
    stdin: Option<Input>,
}

/// Fields being built by word expansion (see POSIX "Field Splitting"), each with its pattern
/// for pathname expansion when an unquoted `*`, `?` or `[` is in it.
#[derive(Default)]
struct Fields {
    done: Vec<(String, Option<String>)>,
    cur: String,
    /// `cur` as a pattern: quoted text escaped, unquoted text as it is.
    pat: String,
    /// Whether `cur` holds an unquoted pattern character.
    magic: bool,
    /// Whether `cur` is a field even if empty (it holds quoted text).
    active: bool,
}

impl Fields {
    /// Quoted text (and quoted expansions): literal, also for pathname expansion.
    fn push_lit(&mut self, s: &str) {
        self.cur.push_str(s);
        self.pat.push_str(&glob::escape(s));
        self.active = true;
    }

    /// Unquoted literal text: its pattern characters expand pathnames.
    fn push_unquoted(&mut self, s: &str) {
        self.cur.push_str(s);
        self.pat.push_str(s);
        self.magic |= s.contains(['*', '?', '[']);
        self.active = true;
    }

    fn push_split(&mut self, s: &str, ifs: &str) {
        for c in s.chars() {
            if ifs.contains(c) {
                self.end_field();
            } else {
                self.cur.push(c);
                self.pat.push(c);
                self.magic |= matches!(c, '*' | '?' | '[');
                self.active = true;
            }
        }
    }

    fn end_field(&mut self) {
        if self.active {
            let pat = std::mem::take(&mut self.pat);
            self.done
                .push((std::mem::take(&mut self.cur), self.magic.then_some(pat)));
            self.active = false;
        }
        self.pat.clear();
        self.magic = false;
    }
}

struct Shell<'a> {
    mounts: &'a Mounts,
    hooks: &'a dyn ShellHooks,
    vars: Vars,
    fd1: Sink,
    fd2: Sink,
    stdin: Input,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    captures: Vec<Vec<u8>>,
    /// Line of the command being run, for `sh: LINE: ...` messages.
    line: usize,
    /// Status of the last command substitution (the status of an assignment-only command).
    subst_status: Option<i32>,
    busy_steps: u64,
    /// Set once the busy limit is hit, so that every enclosing loop stops too.
    aborted: bool,
    call_depth: u32,
    /// Command lists being run inside one another (see `exec_list`).
    nesting: u32,
    loop_depth: u32,
    /// Above zero while running a condition, where `set -e` does not apply.
    no_errexit: u32,
    /// Running a bare exec argv: builtin errors carry no `sh: LINE:` prefix.
    direct: bool,
}

impl<'a> Shell<'a> {
    fn new(
        mounts: &'a Mounts,
        hooks: &'a dyn ShellHooks,
        env: &BTreeMap<String, String>,
        workdir: &str,
        stdin: &[u8],
    ) -> Self {
        let cwd = fs::join(&fs::components(workdir));
        let mut map = env.clone();
        map.entry("PWD".into()).or_insert_with(|| cwd.clone());
        let exported = map.keys().cloned().collect();
        Shell {
            mounts,
            hooks,
            vars: Vars {
                map,
                exported,
                positional: Vec::new(),
                arg0: "sh".into(),
                cwd,
                status: 0,
                errexit: false,
                xtrace: false,
            },
            fd1: Sink::Stdout,
            fd2: Sink::Stderr,
            stdin: Input::new(stdin.to_vec()),
            stdout: Vec::new(),
            stderr: Vec::new(),
            captures: Vec::new(),
            line: 1,
            subst_status: None,
            busy_steps: 0,
            aborted: false,
            call_depth: 0,
            nesting: 0,
            loop_depth: 0,
            no_errexit: 0,
            direct: false,
        }
    }

    // ---- output ----

    fn emit(&mut self, fd: u32, data: &[u8]) {
        let sink = match fd {
            1 => &self.fd1,
            2 => &self.fd2,
            _ => return,
        };
        let buf = match sink {
            Sink::Stdout => &mut self.stdout,
            Sink::Stderr => &mut self.stderr,
            Sink::Capture(i) => match self.captures.get_mut(*i) {
                Some(buf) => buf,
                None => return,
            },
            Sink::File(path) => {
                // Like a write to a file that was removed after being opened, a write whose
                // file has gone is lost.
                let _ = self.mounts.write(path, data, true);
                return;
            }
            Sink::Null => return,
        };
        let room = OUTPUT_LIMIT.saturating_sub(buf.len());
        buf.extend_from_slice(&data[..data.len().min(room)]);
    }

    fn out(&mut self, data: impl AsRef<[u8]>) {
        self.emit(1, data.as_ref());
    }

    /// A utility's error line on stderr (coreutils style: the message names the utility).
    fn err_line(&mut self, msg: impl AsRef<str>) {
        let mut line = msg.as_ref().to_string();
        line.push('\n');
        self.emit(2, line.as_bytes());
    }

    /// A shell error line: `sh: LINE: msg` (dash style), or `msg` for a bare exec.
    fn diag(&mut self, msg: impl AsRef<str>) {
        if self.direct {
            self.err_line(msg);
        } else {
            let line = format!("{}: {}: {}", self.vars.arg0, self.line, msg.as_ref());
            self.err_line(line);
        }
    }

    // ---- paths and variables ----

    /// The absolute components of `path` seen from the current directory.
    fn abs(&self, path: &str) -> Vec<String> {
        if path.starts_with('/') {
            fs::components(path)
        } else {
            fs::components(&format!("{}/{}", self.vars.cwd, path))
        }
    }

    fn set_var(&mut self, name: &str, value: String) {
        self.vars.map.insert(name.to_string(), value);
    }

    fn param(&self, name: &str) -> Option<String> {
        let v = &self.vars;
        match name {
            "?" => Some(v.status.to_string()),
            "#" => Some(v.positional.len().to_string()),
            "@" | "*" => Some(v.positional.join(" ")),
            // No real processes: a fixed, plausible pid.
            "$" => Some("100".into()),
            "!" => None,
            "-" => Some(
                [(v.errexit, 'e'), (v.xtrace, 'x')]
                    .iter()
                    .filter(|(on, _)| *on)
                    .map(|(_, c)| *c)
                    .collect(),
            ),
            "0" => Some(v.arg0.clone()),
            n if n.bytes().all(|b| b.is_ascii_digit()) => {
                let i: usize = n.parse().ok()?;
                v.positional.get(i.checked_sub(1)?).cloned()
            }
            n => v.map.get(n).cloned(),
        }
    }

    fn ifs(&self) -> String {
        self.vars
            .map
            .get("IFS")
            .cloned()
            .unwrap_or_else(|| " \t\n".into())
    }

    // ---- expansion ----

    async fn expand_fields(&mut self, words: &[Word]) -> Result<Vec<String>, Flow> {
        let mut fields = Fields::default();
        for w in words {
            self.expand_parts(&w.parts, &mut fields, false).await?;
            fields.end_field();
        }
        let mut out = Vec::with_capacity(fields.done.len());
        for (text, pattern) in fields.done {
            match pattern.map(|p| self.pathnames(&p)) {
                Some(found) if !found.is_empty() => out.extend(found),
                _ => out.push(text),
            }
        }
        Ok(out)
    }

    /// Pathname expansion: the sorted paths `pattern` matches, component by component (a
    /// leading `.` only matched by a pattern that starts with one); none leaves the word as it
    /// is, as POSIX says.
    fn pathnames(&self, pattern: &str) -> Vec<String> {
        let absolute = pattern.starts_with('/');
        // (path as written, its absolute components)
        let mut found: Vec<(String, Vec<String>)> = vec![(
            if absolute { "/".into() } else { String::new() },
            if absolute {
                Vec::new()
            } else {
                fs::components(&self.vars.cwd)
            },
        )];
        let comps: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
        for (i, comp) in comps.iter().enumerate() {
            let last = i + 1 == comps.len();
            let mut next = Vec::new();
            for (shown, abs) in &found {
                let join = |name: &str| {
                    let shown = if shown.is_empty() || shown.ends_with('/') {
                        format!("{shown}{name}")
                    } else {
                        format!("{shown}/{name}")
                    };
                    let mut abs = abs.clone();
                    abs.push(name.to_string());
                    (shown, abs)
                };
                if !glob::has_magic(comp) {
                    let (shown, abs) = join(&glob::unescape(comp));
                    if !last || self.mounts.stat(&abs).is_ok() {
                        next.push((shown, abs));
                    }
                    continue;
                }
                let Ok(names) = self.mounts.list(abs) else {
                    continue;
                };
                for name in names {
                    if name.starts_with('.') && !comp.starts_with('.') {
                        continue;
                    }
                    if glob::matches(comp, &name) {
                        next.push(join(&name));
                    }
                }
            }
            found = next;
        }
        let mut paths: Vec<String> = found
            .into_iter()
            .filter(|(_, abs)| self.mounts.stat(abs).is_ok())
            .map(|(shown, _)| shown)
            .collect();
        paths.sort();
        paths
    }

    /// A word expanded to one string (assignments, redirection targets): no splitting.
    async fn expand_string(&mut self, parts: &[Part]) -> Result<String, Flow> {
        let mut fields = Fields::default();
        self.expand_parts(parts, &mut fields, true).await?;
        Ok(fields.cur)
    }

    fn expand_parts<'s>(
        &'s mut self,
        parts: &'s [Part],
        fields: &'s mut Fields,
        whole: bool,
    ) -> BoxFuture<'s, Result<(), Flow>> {
        Box::pin(async move {
            if self.nesting >= NESTING_LIMIT {
                self.diag("nesting too deep (emulated shell limit)");
                return Err(Flow::Exit(2));
            }
            self.nesting += 1;
            let result = self.expand_parts_inner(parts, fields, whole).await;
            self.nesting -= 1;
            result
        })
    }

    async fn expand_parts_inner(
        &mut self,
        parts: &[Part],
        fields: &mut Fields,
        whole: bool,
    ) -> Result<(), Flow> {
        {
            let ifs = self.ifs();
            for part in parts {
                let (value, quoted) = match part {
                    Part::Lit(s) => {
                        fields.push_unquoted(s);
                        continue;
                    }
                    Part::Quoted(s) => {
                        fields.push_lit(s);
                        continue;
                    }
                    Part::Param {
                        name,
                        op: ParamOp::Plain,
                        quoted: true,
                    } if name == "@" && !whole => {
                        // "$@": one field per positional parameter.
                        let args = self.vars.positional.clone();
                        for (i, arg) in args.iter().enumerate() {
                            if i > 0 {
                                fields.active = true;
                                fields.end_field();
                            }
                            fields.push_lit(arg);
                        }
                        continue;
                    }
                    Part::Param { name, op, quoted } => {
                        (self.param_value(name, op).await?, *quoted)
                    }
                    Part::Subst { body, quoted } => (self.command_subst(body).await?, *quoted),
                    Part::Arith { parts, quoted } => {
                        let expr = self.expand_string(parts).await?;
                        let value = arith::eval(&expr, &|name| self.param(name));
                        match value {
                            Ok(n) => (n.to_string(), *quoted),
                            Err(msg) if msg.starts_with("Illegal number") => {
                                self.diag(msg);
                                return Err(Flow::Exit(2));
                            }
                            Err(msg) => {
                                self.diag(format!("arithmetic expression: {msg}: \"{expr}\""));
                                return Err(Flow::Exit(2));
                            }
                        }
                    }
                };
                if quoted || whole {
                    fields.push_lit(&value);
                } else {
                    fields.push_split(&value, &ifs);
                }
            }
            Ok(())
        }
    }

    /// A pattern word (`case`, `${X%p}`): unquoted text keeps its glob meaning, quoted text
    /// and quoted expansions are escaped so they match literally.
    async fn expand_pattern(&mut self, parts: &[Part]) -> Result<String, Flow> {
        let mut pattern = String::new();
        for part in parts {
            let (text, quoted) = match part {
                Part::Lit(s) => (s.clone(), false),
                Part::Quoted(s) => (s.clone(), true),
                Part::Param { quoted, .. }
                | Part::Subst { quoted, .. }
                | Part::Arith { quoted, .. } => (
                    self.expand_string(std::slice::from_ref(part)).await?,
                    *quoted,
                ),
            };
            if quoted {
                pattern.push_str(&glob::escape(&text));
            } else {
                pattern.push_str(&text);
            }
        }
        Ok(pattern)
    }

    async fn param_value(&mut self, name: &str, op: &ParamOp) -> Result<String, Flow> {
        let value = self.param(name);
        let set = |colon: bool| match &value {
            Some(v) => !colon || !v.is_empty(),
            None => false,
        };
        Ok(match op {
            ParamOp::Plain => value.unwrap_or_default(),
            ParamOp::Length => value.map_or(0, |v| v.chars().count()).to_string(),
            ParamOp::Default { colon, word } => match set(*colon) {
                true => value.unwrap_or_default(),
                false => self.expand_string(word).await?,
            },
            ParamOp::Assign { colon, word } => match set(*colon) {
                true => value.unwrap_or_default(),
                false => {
                    let v = self.expand_string(word).await?;
                    if !parse::is_name(name) {
                        self.diag(format!("{name}: bad variable name"));
                        return Err(Flow::Exit(2));
                    }
                    self.set_var(name, v.clone());
                    v
                }
            },
            ParamOp::Alt { colon, word } => match set(*colon) {
                true => self.expand_string(word).await?,
                false => String::new(),
            },
            ParamOp::Trim {
                suffix,
                longest,
                pattern,
            } => {
                let pattern = self.expand_pattern(pattern).await?;
                glob::trim(&value.unwrap_or_default(), &pattern, *suffix, *longest)
            }
            ParamOp::Error { colon, word } => match set(*colon) {
                true => value.unwrap_or_default(),
                false => {
                    let mut msg = self.expand_string(word).await?;
                    if msg.is_empty() {
                        msg = if *colon {
                            "parameter null or not set"
                        } else {
                            "parameter not set"
                        }
                        .into();
                    }
                    self.diag(format!("{name}: {msg}"));
                    return Err(Flow::Exit(2));
                }
            },
        })
    }

    async fn command_subst(&mut self, body: &List) -> Result<String, Flow> {
        self.captures.push(Vec::new());
        let idx = self.captures.len() - 1;
        let saved_fd1 = std::mem::replace(&mut self.fd1, Sink::Capture(idx));
        let saved_vars = self.vars.clone();
        let result = self.exec_list(body).await;
        self.vars = saved_vars;
        self.fd1 = saved_fd1;
        let mut out = self.captures.pop().unwrap_or_default();
        if self.aborted {
            return Err(Flow::Exit(2));
        }
        self.subst_status = Some(flow_status(result));
        while out.last() == Some(&b'\n') {
            out.pop();
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    // ---- redirection ----

    /// Applies redirections in order. None if one failed (already reported and undone).
    async fn redirect(&mut self, redirs: &[Redir]) -> Result<Option<SavedFds>, Flow> {
        let mut saved = SavedFds {
            fd1: self.fd1.clone(),
            fd2: self.fd2.clone(),
            stdin: None,
        };
        for r in redirs {
            let target = self.expand_string(&r.target.parts).await?;
            if let Err(msg) = self.apply_redirect(r, &target, &mut saved) {
                self.diag(msg);
                self.restore(saved);
                return Ok(None);
            }
        }
        Ok(Some(saved))
    }

    fn apply_redirect(
        &mut self,
        r: &Redir,
        target: &str,
        saved: &mut SavedFds,
    ) -> Result<(), String> {
        let sink = match r.op {
            RedirOp::Out | RedirOp::Append => self.open_out(target, r.op == RedirOp::Append)?,
            RedirOp::DupOut => match target {
                "1" => self.fd1.clone(),
                "2" => self.fd2.clone(),
                "-" => Sink::Null,
                _ => return Err(format!("{target}: Bad fd number")),
            },
            RedirOp::In | RedirOp::ReadWrite | RedirOp::DupIn => {
                let input = match (r.op, target) {
                    (RedirOp::DupIn, "0") => return Ok(()),
                    (RedirOp::DupIn, "-") => Vec::new(),
                    (RedirOp::DupIn, _) => return Err(format!("{target}: Bad fd number")),
                    _ => self.open_in(target, r.op == RedirOp::ReadWrite)?,
                };
                if r.fd == 0 {
                    let old = std::mem::replace(&mut self.stdin, Input::new(input));
                    saved.stdin.get_or_insert(old);
                }
                return Ok(());
            }
        };
        match r.fd {
            1 => self.fd1 = sink,
            2 => self.fd2 = sink,
            // Only fds 0-2 exist; opening others still creates the file, as it would.
            _ => {}
        }
        Ok(())
    }

    fn open_out(&mut self, target: &str, append: bool) -> Result<Sink, String> {
        match target {
            "/dev/null" => Ok(Sink::Null),
            "/dev/stdout" | "/dev/fd/1" => Ok(self.fd1.clone()),
            "/dev/stderr" | "/dev/fd/2" => Ok(self.fd2.clone()),
            _ => {
                let abs = self.abs(target);
                match self.mounts.write(&abs, b"", append) {
                    Ok(()) => Ok(Sink::File(abs)),
                    Err(FsError::NotFound) => {
                        Err(format!("cannot create {target}: Directory nonexistent"))
                    }
                    Err(e) => Err(format!("cannot create {target}: {}", e.message())),
                }
            }
        }
    }

    fn open_in(&mut self, target: &str, create: bool) -> Result<Vec<u8>, String> {
        match target {
            "/dev/null" => Ok(Vec::new()),
            "/dev/stdin" | "/dev/fd/0" => Ok(self.stdin.read_all()),
            _ => {
                let abs = self.abs(target);
                if create && self.mounts.stat(&abs).is_err() {
                    self.mounts
                        .write(&abs, b"", true)
                        .map_err(|e| format!("cannot create {target}: {}", e.message()))?;
                }
                match self.mounts.read(&abs) {
                    Ok(data) => Ok(data),
                    Err(FsError::NotFound) => Err(format!("cannot open {target}: No such file")),
                    Err(e) => Err(format!("cannot open {target}: {}", e.message())),
                }
            }
        }
    }

    fn restore(&mut self, saved: SavedFds) {
        self.fd1 = saved.fd1;
        self.fd2 = saved.fd2;
        if let Some(stdin) = saved.stdin {
            self.stdin = stdin;
        }
    }

    // ---- execution ----

    /// Counts a command; yields now and then, and stops a loop that never sleeps.
    async fn tick(&mut self) -> Result<(), Flow> {
        self.busy_steps += 1;
        if self.busy_steps.is_multiple_of(1024) {
            tokio::task::yield_now().await;
        }
        if self.busy_steps > BUSY_LIMIT && !self.aborted {
            self.aborted = true;
            self.diag(format!(
                "stopped after {BUSY_LIMIT} commands without a sleep (emulated shell limit)"
            ));
        }
        if self.aborted {
            return Err(Flow::Exit(2));
        }
        Ok(())
    }

    /// Runs a whole script the way `sh -c` does: one complete command (line) at a time.
    async fn run_script(&mut self, src: &str) -> i32 {
        let mut parser = Parser::new(src);
        loop {
            match parser.next_command() {
                Ok(None) => return self.vars.status,
                Ok(Some(list)) => match self.exec_list(&list).await {
                    Ok(status) => self.vars.status = status,
                    Err(Flow::Exit(status)) => return status,
                    // `break` outside a loop does nothing.
                    Err(Flow::Break(_) | Flow::Continue(_)) => {}
                },
                Err(e) => {
                    self.line = e.line;
                    self.diag(format!("Syntax error: {}", e.message));
                    return 2;
                }
            }
        }
    }

    /// Every recursion of the interpreter (compound commands, substitutions, `eval`, nested
    /// `sh`) passes through here, so this is where the nesting depth is bounded.
    fn exec_list<'s>(&'s mut self, list: &'s [AndOr]) -> BoxFuture<'s, Status> {
        Box::pin(async move {
            if self.nesting >= NESTING_LIMIT {
                self.diag("nesting too deep (emulated shell limit)");
                return Err(Flow::Exit(2));
            }
            self.nesting += 1;
            let mut status = Ok(self.vars.status);
            for and_or in list {
                status = self.exec_and_or(and_or).await;
                if status.is_err() {
                    break;
                }
            }
            self.nesting -= 1;
            status
        })
    }

    async fn exec_and_or(&mut self, and_or: &AndOr) -> Status {
        let mut status = self.exec_pipeline(&and_or.first).await?;
        // `set -e` only applies when the last pipeline of the list ran and failed un-negated.
        let mut checked = and_or.rest.is_empty() && !and_or.first.negate;
        for (i, (and, pipeline)) in and_or.rest.iter().enumerate() {
            self.vars.status = status;
            if *and == (status == 0) {
                status = self.exec_pipeline(pipeline).await?;
                checked = i + 1 == and_or.rest.len() && !pipeline.negate;
            }
        }
        self.vars.status = status;
        if checked && status != 0 && self.vars.errexit && self.no_errexit == 0 {
            return Err(Flow::Exit(status));
        }
        Ok(status)
    }

    async fn exec_pipeline(&mut self, pipeline: &Pipeline) -> Status {
        if pipeline.negate {
            self.no_errexit += 1;
        }
        let result = self.exec_pipeline_inner(&pipeline.cmds).await;
        if pipeline.negate {
            self.no_errexit -= 1;
        }
        let status = result?;
        Ok(match pipeline.negate {
            true => i32::from(status == 0),
            false => status,
        })
    }

    async fn exec_pipeline_inner(&mut self, cmds: &[Command]) -> Status {
        if let [cmd] = cmds {
            return self.exec_command(cmd).await;
        }
        let mut piped: Option<Vec<u8>> = None;
        let mut status = 0;
        for (i, cmd) in cmds.iter().enumerate() {
            let saved_stdin = piped
                .take()
                .map(|data| std::mem::replace(&mut self.stdin, Input::new(data)));
            let last = i + 1 == cmds.len();
            let saved_fd1 = if last {
                None
            } else {
                self.captures.push(Vec::new());
                let idx = self.captures.len() - 1;
                Some(std::mem::replace(&mut self.fd1, Sink::Capture(idx)))
            };
            // Every element of a pipeline is a subshell.
            let saved_vars = self.vars.clone();
            let saved_loops = std::mem::take(&mut self.loop_depth);
            status = flow_status(self.exec_command(cmd).await);
            self.vars = saved_vars;
            self.loop_depth = saved_loops;
            if let Some(fd1) = saved_fd1 {
                self.fd1 = fd1;
                piped = self.captures.pop();
            }
            if let Some(stdin) = saved_stdin {
                self.stdin = stdin;
            }
            if self.aborted {
                return Err(Flow::Exit(2));
            }
        }
        Ok(status)
    }

    async fn exec_command(&mut self, cmd: &Command) -> Status {
        self.line = cmd.line;
        self.tick().await?;
        if let CmdKind::Simple { assigns, words } = &cmd.kind {
            return self.exec_simple(assigns, words, &cmd.redirs).await;
        }
        let Some(saved) = self.redirect(&cmd.redirs).await? else {
            return Ok(2);
        };
        let result = self.exec_compound(&cmd.kind).await;
        self.restore(saved);
        result
    }

    async fn exec_compound(&mut self, kind: &CmdKind) -> Status {
        match kind {
            CmdKind::Simple { .. } => Ok(0),
            CmdKind::Group(body) => self.exec_list(body).await,
            CmdKind::Subshell(body) => {
                let saved_vars = self.vars.clone();
                let saved_loops = std::mem::take(&mut self.loop_depth);
                let result = self.exec_list(body).await;
                self.vars = saved_vars;
                self.loop_depth = saved_loops;
                if self.aborted {
                    return Err(Flow::Exit(2));
                }
                Ok(flow_status(result))
            }
            CmdKind::If {
                branches,
                otherwise,
            } => {
                for (cond, body) in branches {
                    if self.exec_condition(cond).await? == 0 {
                        return self.exec_list(body).await;
                    }
                }
                match otherwise {
                    Some(body) => self.exec_list(body).await,
                    None => Ok(0),
                }
            }
            CmdKind::Loop { until, cond, body } => {
                self.loop_depth += 1;
                let result = self.exec_loop(*until, cond, body).await;
                self.loop_depth -= 1;
                result
            }
            CmdKind::Case { word, items } => {
                let subject = self.expand_string(&word.parts).await?;
                for (patterns, body) in items {
                    for pattern in patterns {
                        let pattern = self.expand_pattern(&pattern.parts).await?;
                        if glob::matches(&pattern, &subject) {
                            return match body.is_empty() {
                                true => Ok(0),
                                false => self.exec_list(body).await,
                            };
                        }
                    }
                }
                Ok(0)
            }
            CmdKind::For { var, items, body } => {
                let items = match items {
                    Some(words) => self.expand_fields(words).await?,
                    None => self.vars.positional.clone(),
                };
                self.loop_depth += 1;
                let result = self.exec_for(var, &items, body).await;
                self.loop_depth -= 1;
                result
            }
        }
    }

    async fn exec_condition(&mut self, cond: &List) -> Status {
        self.no_errexit += 1;
        let result = self.exec_list(cond).await;
        self.no_errexit -= 1;
        result
    }

    async fn exec_loop(&mut self, until: bool, cond: &List, body: &List) -> Status {
        let mut status = 0;
        loop {
            let c = match self.exec_condition(cond).await {
                Ok(c) => c,
                Err(Flow::Break(n)) => return loop_exit(n, Flow::Break, 0),
                Err(Flow::Continue(n)) if n <= 1 => continue,
                Err(Flow::Continue(n)) => return Err(Flow::Continue(n - 1)),
                Err(e) => return Err(e),
            };
            if (c == 0) == until {
                return Ok(status);
            }
            match self.exec_list(body).await {
                Ok(s) => status = s,
                Err(Flow::Break(n)) => return loop_exit(n, Flow::Break, 0),
                Err(Flow::Continue(n)) if n <= 1 => status = 0,
                Err(Flow::Continue(n)) => return Err(Flow::Continue(n - 1)),
                Err(e) => return Err(e),
            }
        }
    }

    async fn exec_for(&mut self, var: &str, items: &[String], body: &List) -> Status {
        let mut status = 0;
        for item in items {
            self.set_var(var, item.clone());
            match self.exec_list(body).await {
                Ok(s) => status = s,
                Err(Flow::Break(n)) => return loop_exit(n, Flow::Break, 0),
                Err(Flow::Continue(n)) if n <= 1 => status = 0,
                Err(Flow::Continue(n)) => return Err(Flow::Continue(n - 1)),
                Err(e) => return Err(e),
            }
        }
        Ok(status)
    }

    async fn exec_simple(
        &mut self,
        assigns: &[(String, Word)],
        words: &[Word],
        redirs: &[Redir],
    ) -> Status {
        self.subst_status = None;
        let argv = self.expand_fields(words).await?;
        let Some(saved) = self.redirect(redirs).await? else {
            return Ok(2);
        };
        let result = self.exec_expanded(assigns, &argv).await;
        self.restore(saved);
        result
    }

    async fn exec_expanded(&mut self, assigns: &[(String, Word)], argv: &[String]) -> Status {
        let mut values = Vec::with_capacity(assigns.len());
        for (name, word) in assigns {
            values.push((name.clone(), self.expand_string(&word.parts).await?));
        }
        if argv.is_empty() {
            for (name, value) in values {
                self.set_var(&name, value);
            }
            return Ok(self.subst_status.unwrap_or(0));
        }
        if self.vars.xtrace {
            let trace = format!("+ {}\n", argv.join(" "));
            self.emit(2, trace.as_bytes());
        }
        // `VAR=x cmd`: the assignment holds for this command only (and is exported to it).
        let mut previous = Vec::with_capacity(values.len());
        for (name, value) in values {
            let was_exported = !self.vars.exported.insert(name.clone());
            previous.push((
                name.clone(),
                self.vars.map.insert(name, value),
                was_exported,
            ));
        }
        let result = self.run_cmd(argv).await;
        for (name, old, was_exported) in previous.into_iter().rev() {
            match old {
                Some(v) => self.vars.map.insert(name.clone(), v),
                None => self.vars.map.remove(&name),
            };
            if !was_exported {
                self.vars.exported.remove(&name);
            }
        }
        result
    }

    /// `sh [-ex] -c SCRIPT [NAME [ARGS...]]`, `sh [-ex] FILE [ARGS...]` or `sh [-s] [ARGS...]`
    /// (script on stdin), run in a child shell that sees only exported variables.
    async fn invoke_sh(&mut self, name: &str, args: &[String]) -> i32 {
        let mut command = false;
        let mut from_stdin = false;
        let mut errexit = false;
        let mut xtrace = false;
        let mut rest = args;
        while let Some(opt) = rest.first() {
            if opt == "--" {
                rest = &rest[1..];
                break;
            }
            let (on, letters) = match opt.as_bytes().first() {
                Some(b'-') if opt.len() > 1 => (true, &opt[1..]),
                Some(b'+') if opt.len() > 1 => (false, &opt[1..]),
                _ => break,
            };
            for c in letters.chars() {
                match c {
                    'c' => command = on,
                    's' => from_stdin = on,
                    'e' => errexit = on,
                    'x' => xtrace = on,
                    _ => {
                        self.err_line(format!("{name}: 0: Illegal option -{c}"));
                        return 2;
                    }
                }
            }
            rest = &rest[1..];
        }
        let (script, arg0, positional) = if command {
            let Some((script, rest)) = rest.split_first() else {
                self.err_line(format!("{name}: 0: -c requires an argument"));
                return 2;
            };
            match rest.split_first() {
                Some((arg0, args)) => (script.clone(), arg0.clone(), args.to_vec()),
                None => (script.clone(), name.to_string(), Vec::new()),
            }
        } else if from_stdin || rest.is_empty() {
            let script = String::from_utf8_lossy(&self.stdin.read_all()).into_owned();
            (script, name.to_string(), rest.to_vec())
        } else {
            let file = &rest[0];
            let script = match self.mounts.read(&self.abs(file)) {
                Ok(data) => String::from_utf8_lossy(&data).into_owned(),
                Err(_) => {
                    self.err_line(format!("{name}: 0: cannot open {file}: No such file"));
                    return 2;
                }
            };
            (script, file.clone(), rest[1..].to_vec())
        };
        if self.call_depth >= CALL_DEPTH_LIMIT {
            self.diag(format!(
                "{name}: too many nested shells (emulated shell limit)"
            ));
            return 2;
        }
        let exported = &self.vars.exported;
        let child = Vars {
            map: self
                .vars
                .map
                .iter()
                .filter(|(k, _)| exported.contains(*k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            exported: exported.clone(),
            positional,
            arg0,
            cwd: self.vars.cwd.clone(),
            status: 0,
            errexit,
            xtrace,
        };
        let saved_vars = std::mem::replace(&mut self.vars, child);
        let saved_direct = std::mem::replace(&mut self.direct, false);
        let saved_loops = std::mem::take(&mut self.loop_depth);
        let saved_line = self.line;
        self.call_depth += 1;
        let status = self.run_script(&script).await;
        self.call_depth -= 1;
        self.vars = saved_vars;
        self.direct = saved_direct;
        self.loop_depth = saved_loops;
        self.line = saved_line;
        status
    }
}

/// Leaving a loop by `break N`: this loop ends, and N-1 enclosing ones too.
fn loop_exit(n: u32, flow: fn(u32) -> Flow, status: i32) -> Status {
    if n <= 1 { Ok(status) } else { Err(flow(n - 1)) }
}
