//! The commands: dash builtins (echo, printf, test, cd, ...) and the few coreutils a
//! container image is expected to have (cat, ls, mkdir, rm, wc, head, tail, date, sleep...).
//! Error wording follows dash for builtins and GNU coreutils for utilities.

use std::time::Duration;

use super::{Flow, Shell, Status, is_shell};
use crate::error::FsError;
use crate::fs::{self, Kind};
use crate::parse::{self, Parser};

/// Linux signal names by number (index 0 is signal 0, the existence check).
const SIGNALS: [&str; 32] = [
    "0", "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
    "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG",
    "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS",
];

/// Largest width or precision honoured by printf (keeps `%999999999d` from exhausting memory).
const MAX_FIELD: usize = 1 << 16;

fn lines_of(data: &[u8]) -> Vec<&[u8]> {
    data.split_inclusive(|b| *b == b'\n').collect()
}

impl Shell<'_> {
    /// Runs an expanded command line.
    pub(super) async fn run_cmd(&mut self, argv: &[String]) -> Status {
        let Some((name, args)) = argv.split_first() else {
            return Ok(0);
        };
        let status = match super::base_name(name) {
            ":" | "true" => 0,
            "false" => 1,
            "echo" => self.echo(args),
            "printf" => self.printf(args),
            "cat" => self.cat(args),
            "test" => self.test(args, false),
            "[" => self.test(args, true),
            "mkdir" => self.mkdir(args),
            "rm" => self.rm(args),
            "ls" => self.ls(args),
            "touch" => self.touch(args),
            "sleep" => self.sleep(args).await,
            "kill" => self.kill(args),
            "date" => self.date(args),
            "wc" => self.wc(args),
            "tr" => self.tr(args),
            "grep" => self.grep(args),
            "head" => self.head_tail(args, true),
            "tail" => self.head_tail(args, false),
            "cd" => self.cd(args),
            "pwd" => {
                let cwd = format!("{}\n", self.vars.cwd);
                self.out(cwd);
                0
            }
            "export" => self.export(args),
            "unset" => {
                for name in args.iter().filter(|a| !a.starts_with('-')) {
                    self.vars.map.remove(name);
                    self.vars.exported.remove(name);
                }
                0
            }
            "env" | "printenv" if args.is_empty() => {
                let lines: String = self
                    .vars
                    .exported
                    .iter()
                    .filter_map(|k| self.vars.map.get(k).map(|v| format!("{k}={v}\n")))
                    .collect();
                self.out(lines);
                0
            }
            "read" => self.read(args),
            "set" => self.set(args),
            "shift" => self.shift(args),
            "exit" => return Err(Flow::Exit(self.exit_status(args))),
            "break" | "continue" => return self.break_continue(name, args),
            "eval" => return self.eval(args).await,
            n if is_shell(n) => Box::pin(self.invoke_sh(name, args)).await,
            _ => return self.external(name, args).await,
        };
        Ok(status)
    }

    /// Not a builtin: a script file named by a path, or "not found".
    async fn external(&mut self, name: &str, args: &[String]) -> Status {
        if name.contains('/') && matches!(self.mounts.stat(&self.abs(name)), Ok(Kind::File { .. }))
        {
            let mut sh_args = vec![name.to_string()];
            sh_args.extend_from_slice(args);
            return Ok(Box::pin(self.invoke_sh("sh", &sh_args)).await);
        }
        if self.direct {
            self.err_line(format!(
                "OCI runtime exec failed: exec failed: unable to start container process: \
                 exec: \"{name}\": executable file not found in $PATH: unknown"
            ));
        } else {
            self.diag(format!("{name}: not found"));
        }
        Ok(127)
    }

    fn echo(&mut self, args: &[String]) -> i32 {
        let (newline, args) = match args.split_first() {
            Some((first, rest)) if first == "-n" => (false, rest),
            _ => (true, args),
        };
        let mut line = args.join(" ");
        if newline {
            line.push('\n');
        }
        self.out(line);
        0
    }

    fn printf(&mut self, args: &[String]) -> i32 {
        let Some((format, mut rest)) = args.split_first() else {
            self.diag("printf: usage: printf format [arg ...]");
            return 2;
        };
        let format: Vec<char> = format.chars().collect();
        let mut out = String::new();
        let mut status = 0;
        loop {
            let before = rest.len();
            match self.printf_once(&format, &mut rest, &mut out, &mut status) {
                Ok(true) => {}
                // `\c` or an invalid directive ends all output.
                Ok(false) | Err(()) => break,
            }
            if rest.is_empty() || rest.len() == before {
                break;
            }
        }
        self.out(out);
        status
    }

    /// One pass over the format. Ok(false) if output must stop (`\c`); Err on a bad directive.
    fn printf_once(
        &mut self,
        f: &[char],
        args: &mut &[String],
        out: &mut String,
        status: &mut i32,
    ) -> Result<bool, ()> {
        let next_arg = |args: &mut &[String]| -> Option<String> {
            let (first, rest) = args.split_first()?;
            *args = rest;
            Some(first.clone())
        };
        let mut i = 0;
        while i < f.len() {
            match f[i] {
                '\\' => {
                    let (text, used, stop) = escape(&f[i + 1..], false);
                    out.push_str(&text);
                    if stop {
                        return Ok(false);
                    }
                    i += 1 + used;
                }
                '%' => {
                    let start = i;
                    i += 1;
                    let mut flags = String::new();
                    while i < f.len() && "-+ #0".contains(f[i]) {
                        flags.push(f[i]);
                        i += 1;
                    }
                    let number = |i: &mut usize, args: &mut &[String]| -> Option<usize> {
                        if *i < f.len() && f[*i] == '*' {
                            *i += 1;
                            let arg = next_arg(args).unwrap_or_default();
                            return Some(arg.trim().parse::<usize>().unwrap_or(0).min(MAX_FIELD));
                        }
                        let digits: String =
                            f[*i..].iter().take_while(|c| c.is_ascii_digit()).collect();
                        *i += digits.len();
                        (!digits.is_empty())
                            .then(|| digits.parse::<usize>().unwrap_or(MAX_FIELD).min(MAX_FIELD))
                    };
                    let width = number(&mut i, args).unwrap_or(0);
                    let precision = if i < f.len() && f[i] == '.' {
                        i += 1;
                        Some(number(&mut i, args).unwrap_or(0))
                    } else {
                        None
                    };
                    let Some(&conv) = f.get(i) else {
                        self.diag("printf: %: invalid directive");
                        *status = 1;
                        return Err(());
                    };
                    i += 1;
                    let left = flags.contains('-');
                    let zero = flags.contains('0') && !left;
                    let text = match conv {
                        '%' => "%".to_string(),
                        's' | 'b' => {
                            let arg = next_arg(args).unwrap_or_default();
                            let mut s = if conv == 'b' {
                                let chars: Vec<char> = arg.chars().collect();
                                let (text, _, stop) = escape_all(&chars);
                                if stop {
                                    out.push_str(&pad(&text, width, left));
                                    return Ok(false);
                                }
                                text
                            } else {
                                arg
                            };
                            if let Some(p) = precision {
                                s = s.chars().take(p).collect();
                            }
                            pad(&s, width, left)
                        }
                        'c' => {
                            let arg = next_arg(args).unwrap_or_default();
                            pad(&arg.chars().take(1).collect::<String>(), width, left)
                        }
                        'd' | 'i' | 'u' | 'x' | 'X' | 'o' => {
                            let arg = next_arg(args);
                            let n = match arg.as_deref().map(parse_printf_int) {
                                None => 0,
                                Some(Ok(n)) => n,
                                Some(Err(n)) => {
                                    self.diag(format!(
                                        "printf: {}: expected numeric value",
                                        arg.unwrap_or_default()
                                    ));
                                    *status = 1;
                                    n
                                }
                            };
                            let body = match conv {
                                'x' => format!("{:x}", n as u64),
                                'X' => format!("{:X}", n as u64),
                                'o' => format!("{:o}", n as u64),
                                'u' => (n as u64).to_string(),
                                _ => n.unsigned_abs().to_string(),
                            };
                            let body = match precision {
                                Some(p) if body.len() < p => {
                                    format!("{}{body}", "0".repeat(p - body.len()))
                                }
                                _ => body,
                            };
                            let sign = if matches!(conv, 'd' | 'i') {
                                if n < 0 {
                                    "-"
                                } else if flags.contains('+') {
                                    "+"
                                } else if flags.contains(' ') {
                                    " "
                                } else {
                                    ""
                                }
                            } else {
                                ""
                            };
                            pad_number(sign, &body, width, left, zero && precision.is_none())
                        }
                        'f' | 'e' | 'g' | 'E' | 'G' => {
                            let arg = next_arg(args).unwrap_or_else(|| "0".into());
                            let v: f64 = match arg.trim().parse() {
                                Ok(v) => v,
                                Err(_) => {
                                    self.diag(format!("printf: {arg}: expected numeric value"));
                                    *status = 1;
                                    0.0
                                }
                            };
                            let p = precision.unwrap_or(6);
                            let body = match conv {
                                'f' => format!("{:.*}", p, v.abs()),
                                'e' => format!("{:.*e}", p, v.abs()),
                                'E' => format!("{:.*E}", p, v.abs()),
                                _ => format!("{}", v.abs()),
                            };
                            let sign = if v.is_sign_negative() && v != 0.0 {
                                "-"
                            } else {
                                ""
                            };
                            pad_number(sign, &body, width, left, zero)
                        }
                        _ => {
                            let directive: String = f[start..i].iter().collect();
                            self.diag(format!("printf: {directive}: invalid directive"));
                            *status = 2;
                            return Err(());
                        }
                    };
                    out.push_str(&text);
                }
                c => {
                    out.push(c);
                    i += 1;
                }
            }
        }
        Ok(true)
    }

    pub(super) fn read_path(&mut self, path: &str) -> Result<Vec<u8>, FsError> {
        match path {
            "/dev/null" => Ok(Vec::new()),
            "-" | "/dev/stdin" => Ok(self.stdin.read_all()),
            _ => self.mounts.read(&self.abs(path)),
        }
    }

    fn cat(&mut self, args: &[String]) -> i32 {
        let mut files: Vec<&str> = args
            .iter()
            .map(String::as_str)
            .filter(|a| *a != "-u")
            .collect();
        if files.is_empty() {
            files.push("-");
        }
        let mut status = 0;
        for file in files {
            match self.read_path(file) {
                Ok(data) => self.out(data),
                Err(e) => {
                    self.err_line(format!("cat: {file}: {}", e.message()));
                    status = 1;
                }
            }
        }
        status
    }

    fn test(&mut self, args: &[String], bracket: bool) -> i32 {
        let name = if bracket { "[" } else { "test" };
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        if bracket {
            if args.last() != Some(&"]") {
                self.diag("[: missing ]");
                return 2;
            }
            args.pop();
        }
        match self.test_eval(&args) {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(msg) => {
                self.diag(format!("{name}: {msg}"));
                2
            }
        }
    }

    /// POSIX `test`: decided by the number of arguments up to four, then a small grammar.
    fn test_eval(&self, a: &[&str]) -> Result<bool, String> {
        match a {
            [] => Ok(false),
            [s] => Ok(!s.is_empty()),
            ["!", s] => Ok(s.is_empty()),
            [op, s] if is_unary(op) => self.test_unary(op, s),
            [op, _] => Err(format!("{op}: unexpected operator")),
            [l, op, r] if is_binary(op) => test_binary(l, op, r),
            ["!", rest @ ..] if a.len() <= 4 => Ok(!self.test_eval(rest)?),
            ["(", s, ")"] => Ok(!s.is_empty()),
            ["(", rest @ .., ")"] if a.len() == 4 => self.test_eval(rest),
            [_, op, _] => Err(format!("{op}: unexpected operator")),
            _ => {
                let mut pos = 0;
                let v = self.test_or(a, &mut pos, 0)?;
                match a.get(pos) {
                    None => Ok(v),
                    Some(extra) => Err(format!("{extra}: unexpected operator")),
                }
            }
        }
    }

    fn test_or(&self, a: &[&str], pos: &mut usize, depth: usize) -> Result<bool, String> {
        let mut v = self.test_and(a, pos, depth)?;
        while a.get(*pos) == Some(&"-o") {
            *pos += 1;
            let r = self.test_and(a, pos, depth)?;
            v = v || r;
        }
        Ok(v)
    }

    fn test_and(&self, a: &[&str], pos: &mut usize, depth: usize) -> Result<bool, String> {
        let mut v = self.test_primary(a, pos, depth)?;
        while a.get(*pos) == Some(&"-a") {
            *pos += 1;
            let r = self.test_primary(a, pos, depth)?;
            v = v && r;
        }
        Ok(v)
    }

    fn test_primary(&self, a: &[&str], pos: &mut usize, depth: usize) -> Result<bool, String> {
        if depth > 64 {
            return Err("expression too complex".into());
        }
        let mut negate = false;
        while a.get(*pos) == Some(&"!") {
            negate = !negate;
            *pos += 1;
        }
        let v = match (a.get(*pos), a.get(*pos + 1), a.get(*pos + 2)) {
            (None, _, _) => return Err("argument expected".into()),
            (Some(&"("), _, _) => {
                *pos += 1;
                let v = self.test_or(a, pos, depth + 1)?;
                if a.get(*pos) != Some(&")") {
                    return Err("closing paren expected".into());
                }
                *pos += 1;
                v
            }
            (Some(l), Some(op), Some(r)) if is_binary(op) && !matches!(*op, "-a" | "-o") => {
                *pos += 3;
                test_binary(l, op, r)?
            }
            (Some(op), Some(s), _) if is_unary(op) => {
                *pos += 2;
                self.test_unary(op, s)?
            }
            (Some(s), _, _) => {
                *pos += 1;
                !s.is_empty()
            }
        };
        Ok(v != negate)
    }

    fn test_unary(&self, op: &str, s: &str) -> Result<bool, String> {
        let kind = || match s {
            "/dev/null" | "/dev/stdin" | "/dev/stdout" | "/dev/stderr" => None,
            _ => self.mounts.stat(&self.abs(s)).ok(),
        };
        let is_dev = matches!(
            s,
            "/dev/null" | "/dev/stdin" | "/dev/stdout" | "/dev/stderr"
        );
        Ok(match op {
            "-z" => s.is_empty(),
            "-n" => !s.is_empty(),
            "-e" | "-r" | "-w" | "-x" => is_dev || kind().is_some(),
            "-f" => matches!(kind(), Some(Kind::File { .. })),
            "-d" => matches!(kind(), Some(Kind::Dir)),
            "-s" => matches!(kind(), Some(Kind::Dir) | Some(Kind::File { size: 1.. })),
            "-c" => is_dev,
            // No symlinks, block devices, pipes, sockets, terminals, setuid bits.
            _ => false,
        })
    }

    fn mkdir(&mut self, args: &[String]) -> i32 {
        let mut parents = false;
        let mut dirs = Vec::new();
        let mut iter = args.iter();
        let mut options = true;
        while let Some(arg) = iter.next() {
            match arg.as_str() {
                "--" if options => options = false,
                "-m" if options => {
                    iter.next();
                }
                a if options && a.starts_with('-') && a.len() > 1 => {
                    for c in a[1..].chars() {
                        match c {
                            'p' => parents = true,
                            'v' => {}
                            _ => {
                                self.err_line(format!("mkdir: invalid option -- '{c}'"));
                                return 1;
                            }
                        }
                    }
                }
                a => dirs.push(a),
            }
        }
        if dirs.is_empty() {
            self.err_line("mkdir: missing operand");
            return 1;
        }
        let mut status = 0;
        for dir in dirs {
            if let Err(e) = self.mounts.mkdir(&self.abs(dir), parents) {
                self.err_line(format!(
                    "mkdir: cannot create directory '{dir}': {}",
                    e.message()
                ));
                status = 1;
            }
        }
        status
    }

    fn rm(&mut self, args: &[String]) -> i32 {
        let (mut force, mut recursive) = (false, false);
        let mut paths = Vec::new();
        let mut options = true;
        for arg in args {
            match arg.as_str() {
                "--" if options => options = false,
                a if options && a.starts_with('-') && a.len() > 1 => {
                    for c in a[1..].chars() {
                        match c {
                            'f' => force = true,
                            'r' | 'R' => recursive = true,
                            'v' | 'i' | 'd' => {}
                            _ => {
                                self.err_line(format!("rm: invalid option -- '{c}'"));
                                return 1;
                            }
                        }
                    }
                }
                a => paths.push(a),
            }
        }
        if paths.is_empty() {
            if force {
                return 0;
            }
            self.err_line("rm: missing operand");
            return 1;
        }
        let mut status = 0;
        for path in paths {
            let abs = self.abs(path);
            if matches!(path.rsplit('/').find(|c| !c.is_empty()), Some("." | "..")) {
                self.err_line(format!(
                    "rm: refusing to remove '.' or '..' directory: skipping '{path}'"
                ));
                status = 1;
                continue;
            }
            if abs.is_empty() && recursive {
                self.err_line("rm: it is dangerous to operate recursively on '/'");
                self.err_line("rm: use --no-preserve-root to override this failsafe");
                status = 1;
                continue;
            }
            match self.mounts.remove(&abs, recursive) {
                Ok(()) => {}
                Err(FsError::NotFound) if force => {}
                Err(e) => {
                    self.err_line(format!("rm: cannot remove '{path}': {}", e.message()));
                    status = 1;
                }
            }
        }
        status
    }

    fn ls(&mut self, args: &[String]) -> i32 {
        let (mut all, mut almost_all) = (false, false);
        let mut paths = Vec::new();
        let mut options = true;
        for arg in args {
            match arg.as_str() {
                "--" if options => options = false,
                a if options && a.starts_with('-') && a.len() > 1 => {
                    for c in a[1..].chars() {
                        match c {
                            'a' => all = true,
                            'A' => almost_all = true,
                            '1' => {}
                            _ => {
                                self.err_line(format!("ls: invalid option -- '{c}'"));
                                return 2;
                            }
                        }
                    }
                }
                a => paths.push(a.to_string()),
            }
        }
        if paths.is_empty() {
            paths.push(".".into());
        }
        paths.sort();
        let mut status = 0;
        let mut files = Vec::new();
        let mut dirs = Vec::new();
        for path in &paths {
            match self.mounts.stat(&self.abs(path)) {
                Ok(Kind::Dir) => dirs.push(path),
                Ok(Kind::File { .. }) => files.push(path),
                Err(e) => {
                    self.err_line(format!("ls: cannot access '{path}': {}", e.message()));
                    status = 2;
                }
            }
        }
        let mut out = String::new();
        for f in &files {
            out.push_str(f);
            out.push('\n');
        }
        let headers = paths.len() > 1;
        for (i, dir) in dirs.iter().enumerate() {
            if headers {
                if i > 0 || !files.is_empty() {
                    out.push('\n');
                }
                out.push_str(&format!("{dir}:\n"));
            }
            let mut names = self.mounts.list(&self.abs(dir)).unwrap_or_default();
            if all {
                names.splice(0..0, [".".to_string(), "..".to_string()]);
            } else if !almost_all {
                names.retain(|n| !n.starts_with('.'));
            }
            for n in names {
                out.push_str(&n);
                out.push('\n');
            }
        }
        self.out(out);
        status
    }

    fn touch(&mut self, args: &[String]) -> i32 {
        let no_create = args.iter().any(|a| a == "-c");
        let files: Vec<&String> = args
            .iter()
            .filter(|a| !a.starts_with('-') || *a == "-")
            .collect();
        if files.is_empty() {
            self.err_line("touch: missing file operand");
            return 1;
        }
        let mut status = 0;
        for file in files {
            let abs = self.abs(file);
            let result = match self.mounts.stat(&abs) {
                Ok(Kind::Dir) => Ok(()),
                Err(FsError::NotFound) if no_create => Ok(()),
                // Appending nothing creates the file, or checks that it is writable.
                _ => self.mounts.write(&abs, b"", true),
            };
            if let Err(e) = result {
                self.err_line(format!("touch: cannot touch '{file}': {}", e.message()));
                status = 1;
            }
        }
        status
    }

    async fn sleep(&mut self, args: &[String]) -> i32 {
        if args.is_empty() {
            self.err_line("sleep: missing operand");
            return 1;
        }
        let mut total = Duration::ZERO;
        for arg in args {
            match parse_duration(arg) {
                Some(d) => total = total.saturating_add(d),
                None => {
                    self.err_line(format!("sleep: invalid time interval '{arg}'"));
                    return 1;
                }
            }
        }
        tokio::time::sleep(total).await;
        self.busy_steps = 0;
        0
    }

    fn kill(&mut self, args: &[String]) -> i32 {
        let mut signal = "TERM".to_string();
        let mut rest = args;
        match rest.first().map(String::as_str) {
            Some("-l" | "-L") => {
                let list = SIGNALS[1..].join(" ");
                self.out(format!("{list}\n"));
                return 0;
            }
            Some("-s" | "-n") => match rest.get(1) {
                Some(s) => {
                    signal = s.clone();
                    rest = &rest[2..];
                }
                None => return self.kill_usage(),
            },
            Some("--") => rest = &rest[1..],
            Some(a) if a.starts_with('-') && a.len() > 1 => {
                signal = a[1..].to_string();
                rest = &rest[1..];
            }
            _ => {}
        }
        if rest.first().is_some_and(|a| a == "--") {
            rest = &rest[1..];
        }
        if rest.is_empty() {
            return self.kill_usage();
        }
        let Some(name) = signal_name(&signal) else {
            self.diag(format!("kill: invalid signal number or name: {signal}"));
            return 2;
        };
        let mut status = 0;
        for pid in rest {
            if let Err(e) = self.hooks.kill(pid, name) {
                self.err_line(e.to_string().trim_end_matches('\n'));
                status = 1;
            }
        }
        status
    }

    fn kill_usage(&mut self) -> i32 {
        self.diag("kill: Usage: kill [-s sigspec | -signum | -sigspec] [pid | job]... or\nkill -l [exitstatus]");
        2
    }

    fn date(&mut self, args: &[String]) -> i32 {
        let mut format = "%a %b %e %H:%M:%S UTC %Y".to_string();
        for arg in args {
            match arg.as_str() {
                "-u" | "--utc" | "--universal" => {}
                "-R" | "--rfc-email" | "--rfc-2822" => {
                    format = "%a, %d %b %Y %H:%M:%S +0000".into()
                }
                a if a.starts_with('+') => format = a[1..].to_string(),
                a if a.starts_with('-') => {
                    self.err_line(format!("date: unsupported option '{a}' (emulated shell)"));
                    return 1;
                }
                a => {
                    self.err_line(format!("date: invalid date '{a}'"));
                    return 1;
                }
            }
        }
        let text = strftime(&format, self.hooks.now_unix());
        self.out(format!("{text}\n"));
        0
    }

    fn wc(&mut self, args: &[String]) -> i32 {
        let (mut lines, mut words, mut bytes) = (false, false, false);
        let mut files = Vec::new();
        for arg in args {
            match arg.as_str() {
                a if a.starts_with('-') && a.len() > 1 => {
                    for c in a[1..].chars() {
                        match c {
                            'l' => lines = true,
                            'w' => words = true,
                            'c' | 'm' => bytes = true,
                            _ => {
                                self.err_line(format!("wc: invalid option -- '{c}'"));
                                return 1;
                            }
                        }
                    }
                }
                a => files.push(a.to_string()),
            }
        }
        if !(lines || words || bytes) {
            (lines, words, bytes) = (true, true, true);
        }
        let from_stdin = files.is_empty();
        if from_stdin {
            files.push("-".into());
        }
        let mut status = 0;
        let mut rows: Vec<([usize; 3], Option<String>)> = Vec::new();
        for file in &files {
            match self.read_path(file) {
                Ok(data) => {
                    let counts = [
                        data.iter().filter(|b| **b == b'\n').count(),
                        data.split(|b| b.is_ascii_whitespace())
                            .filter(|w| !w.is_empty())
                            .count(),
                        data.len(),
                    ];
                    rows.push((counts, (!from_stdin).then(|| file.clone())));
                }
                Err(e) => {
                    self.err_line(format!("wc: {file}: {}", e.message()));
                    status = 1;
                }
            }
        }
        if rows.len() > 1 {
            let mut total = [0; 3];
            for (counts, _) in &rows {
                for (t, c) in total.iter_mut().zip(counts) {
                    *t += c;
                }
            }
            rows.push((total, Some("total".into())));
        }
        let selected = [lines, words, bytes];
        let single = selected.iter().filter(|s| **s).count() == 1 && files.len() == 1;
        // coreutils pads to the width of the largest count (7 when reading a pipe).
        let width = if single {
            1
        } else if from_stdin {
            7
        } else {
            rows.iter()
                .flat_map(|(c, _)| c.iter())
                .max()
                .map_or(1, |m| m.to_string().len())
        };
        let mut out = String::new();
        for (counts, name) in rows {
            let cols: Vec<String> = counts
                .iter()
                .zip(selected)
                .filter(|(_, s)| *s)
                .map(|(c, _)| format!("{c:>width$}"))
                .collect();
            out.push_str(&cols.join(" "));
            if let Some(name) = name {
                out.push(' ');
                out.push_str(&name);
            }
            out.push('\n');
        }
        self.out(out);
        status
    }

    /// `head`/`tail` with `-n N`, `-N`, `-c N`, `tail -n +N`, `head -n -N`.
    fn head_tail(&mut self, args: &[String], head: bool) -> i32 {
        let cmd = if head { "head" } else { "tail" };
        let mut count = "10".to_string();
        let mut bytes = false;
        let mut files = Vec::new();
        let mut iter = args.iter();
        while let Some(arg) = iter.next() {
            let a = arg.as_str();
            if a == "-f" || a == "-F" {
                self.err_line(format!("{cmd}: -f is not supported by the emulated shell"));
                return 1;
            } else if a == "-n" || a == "-c" {
                bytes = a == "-c";
                match iter.next() {
                    Some(n) => count = n.clone(),
                    None => {
                        self.err_line(format!(
                            "{cmd}: option requires an argument -- '{}'",
                            &a[1..]
                        ));
                        return 1;
                    }
                }
            } else if let Some(n) = a.strip_prefix("-n").or_else(|| a.strip_prefix("-c")) {
                bytes = a.starts_with("-c");
                count = n.to_string();
            } else if a.len() > 1
                && a.starts_with('-')
                && a[1..].bytes().all(|b| b.is_ascii_digit())
            {
                count = a[1..].to_string();
            } else {
                files.push(a.to_string());
            }
        }
        let from_start = !head && count.starts_with('+');
        let all_but = head && count.starts_with('-');
        let Ok(n) = count.trim_start_matches(['+', '-']).parse::<usize>() else {
            let what = if bytes { "bytes" } else { "lines" };
            self.err_line(format!("{cmd}: invalid number of {what}: '{count}'"));
            return 1;
        };
        if files.is_empty() {
            files.push("-".into());
        }
        let headers = files.len() > 1;
        let mut status = 0;
        for (i, file) in files.iter().enumerate() {
            let data = match self.read_path(file) {
                Ok(d) => d,
                Err(e) => {
                    self.err_line(format!(
                        "{cmd}: cannot open '{file}' for reading: {}",
                        e.message()
                    ));
                    status = 1;
                    continue;
                }
            };
            if headers {
                let name = if file == "-" { "standard input" } else { file };
                let sep = if i > 0 { "\n" } else { "" };
                self.out(format!("{sep}==> {name} <==\n"));
            }
            let pieces: Vec<&[u8]> = if bytes {
                data.chunks(1).collect()
            } else {
                lines_of(&data)
            };
            let len = pieces.len();
            let range = match (head, from_start, all_but) {
                (true, _, false) => 0..n.min(len),
                (true, _, true) => 0..len.saturating_sub(n),
                (false, true, _) => n.saturating_sub(1).min(len)..len,
                (false, false, _) => len.saturating_sub(n)..len,
            };
            let selected = pieces[range].concat();
            self.out(selected);
        }
        status
    }

    fn cd(&mut self, args: &[String]) -> i32 {
        let args: Vec<&String> = args
            .iter()
            .filter(|a| !matches!(a.as_str(), "-L" | "-P"))
            .collect();
        let target = match args.first().map(|s| s.as_str()) {
            None => self
                .vars
                .map
                .get("HOME")
                .cloned()
                .unwrap_or_else(|| "/".into()),
            Some("-") => self
                .vars
                .map
                .get("OLDPWD")
                .cloned()
                .unwrap_or_else(|| self.vars.cwd.clone()),
            Some(dir) => dir.to_string(),
        };
        let abs = self.abs(&target);
        if self.mounts.stat(&abs) != Ok(Kind::Dir) {
            self.diag(format!("cd: can't cd to {target}"));
            return 2;
        }
        let new = fs::join(&abs);
        let old = std::mem::replace(&mut self.vars.cwd, new.clone());
        self.set_var("OLDPWD", old);
        self.set_var("PWD", new.clone());
        if args.first().is_some_and(|a| *a == "-") {
            self.out(format!("{new}\n"));
        }
        0
    }

    fn export(&mut self, args: &[String]) -> i32 {
        let names: Vec<&String> = args.iter().filter(|a| *a != "-p").collect();
        if names.is_empty() {
            let lines: String = self
                .vars
                .exported
                .iter()
                .map(|k| match self.vars.map.get(k) {
                    Some(v) => format!("export {k}='{}'\n", v.replace('\'', "'\\''")),
                    None => format!("export {k}\n"),
                })
                .collect();
            self.out(lines);
            return 0;
        }
        for arg in names {
            let (name, value) = match arg.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (arg.as_str(), None),
            };
            if !parse::is_name(name) {
                self.diag(format!("export: {name}: bad variable name"));
                return 2;
            }
            if let Some(v) = value {
                self.set_var(name, v);
            }
            self.vars.exported.insert(name.to_string());
        }
        0
    }

    fn read(&mut self, args: &[String]) -> i32 {
        let raw = args.iter().any(|a| a == "-r");
        let mut names: Vec<&str> = args
            .iter()
            .filter(|a| !a.starts_with('-'))
            .map(String::as_str)
            .collect();
        if names.is_empty() {
            names.push("REPLY");
        }
        let mut text = String::new();
        let mut got_newline = false;
        while let Some(line) = self.stdin.read_line() {
            let mut s = String::from_utf8_lossy(&line).into_owned();
            got_newline = s.ends_with('\n');
            if got_newline {
                s.pop();
            }
            if !raw && got_newline && s.ends_with('\\') {
                // Backslash-newline continues the line.
                s.pop();
                text.push_str(&s);
                continue;
            }
            text.push_str(&s);
            break;
        }
        if !raw {
            let mut unescaped = String::new();
            let mut chars = text.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => unescaped.extend(chars.next()),
                    c => unescaped.push(c),
                }
            }
            text = unescaped;
        }
        let ifs = self.ifs();
        let mut rest = text.trim_start_matches(|c| ifs.contains(c));
        for (i, name) in names.iter().enumerate() {
            let value = if i + 1 == names.len() {
                rest.trim_end_matches(|c| ifs.contains(c)).to_string()
            } else {
                let end = rest.find(|c| ifs.contains(c)).unwrap_or(rest.len());
                let v = rest[..end].to_string();
                rest = rest[end..].trim_start_matches(|c| ifs.contains(c));
                v
            };
            self.set_var(name, value);
        }
        i32::from(!got_newline)
    }

    fn set(&mut self, args: &[String]) -> i32 {
        if args.is_empty() {
            let lines: String = self
                .vars
                .map
                .iter()
                .map(|(k, v)| format!("{k}='{}'\n", v.replace('\'', "'\\''")))
                .collect();
            self.out(lines);
            return 0;
        }
        let mut rest = args;
        while let Some(opt) = rest.first() {
            if opt == "--" {
                self.vars.positional = rest[1..].to_vec();
                return 0;
            }
            let (on, letters) = match opt.as_bytes().first() {
                Some(b'-') if opt.len() > 1 => (true, &opt[1..]),
                Some(b'+') if opt.len() > 1 => (false, &opt[1..]),
                _ => break,
            };
            for c in letters.chars() {
                match c {
                    'e' => self.vars.errexit = on,
                    'x' => self.vars.xtrace = on,
                    _ => {
                        self.diag(format!("set: Illegal option -{c}"));
                        return 2;
                    }
                }
            }
            rest = &rest[1..];
        }
        if !rest.is_empty() {
            self.vars.positional = rest.to_vec();
        }
        0
    }

    fn shift(&mut self, args: &[String]) -> i32 {
        let n = match args.first().map(|a| a.parse::<usize>()) {
            None => 1,
            Some(Ok(n)) => n,
            Some(Err(_)) => {
                self.diag(format!("shift: Illegal number: {}", args[0]));
                return 2;
            }
        };
        if n > self.vars.positional.len() {
            self.diag("shift: can't shift that many");
            return 2;
        }
        self.vars.positional.drain(..n);
        0
    }

    fn exit_status(&mut self, args: &[String]) -> i32 {
        match args.first() {
            None => self.vars.status,
            Some(a) => match a.parse::<i64>() {
                Ok(n) if n >= 0 => (n % 256) as i32,
                _ => {
                    self.diag(format!("exit: Illegal number: {a}"));
                    2
                }
            },
        }
    }

    fn break_continue(&mut self, name: &str, args: &[String]) -> Status {
        let n = match args.first().map(|a| a.parse::<u32>()) {
            None => 1,
            Some(Ok(n)) if n > 0 => n,
            _ => {
                self.diag(format!("{name}: Illegal number: {}", args[0]));
                return Ok(2);
            }
        };
        if self.loop_depth == 0 {
            return Ok(0);
        }
        let n = n.min(self.loop_depth);
        Err(if name == "break" {
            Flow::Break(n)
        } else {
            Flow::Continue(n)
        })
    }

    async fn eval(&mut self, args: &[String]) -> Status {
        let src = args.join(" ");
        if self.call_depth >= super::CALL_DEPTH_LIMIT {
            self.diag("eval: too deeply nested (emulated shell limit)");
            return Ok(2);
        }
        self.call_depth += 1;
        let mut parser = Parser::new(&src);
        let mut status = Ok(0);
        loop {
            match parser.next_command() {
                Ok(None) => break,
                Ok(Some(list)) => {
                    status = self.exec_list(&list).await;
                    if status.is_err() {
                        break;
                    }
                }
                Err(e) => {
                    self.diag(format!("Syntax error: {}", e.message));
                    status = Ok(2);
                    break;
                }
            }
        }
        self.call_depth -= 1;
        status
    }
}

fn is_unary(op: &str) -> bool {
    matches!(
        op,
        "-e" | "-f"
            | "-d"
            | "-s"
            | "-z"
            | "-n"
            | "-r"
            | "-w"
            | "-x"
            | "-L"
            | "-h"
            | "-b"
            | "-c"
            | "-p"
            | "-S"
            | "-t"
            | "-g"
            | "-u"
            | "-k"
    )
}

fn is_binary(op: &str) -> bool {
    matches!(
        op,
        "=" | "!=" | "-eq" | "-ne" | "-lt" | "-le" | "-gt" | "-ge" | "-a" | "-o"
    )
}

fn test_binary(l: &str, op: &str, r: &str) -> Result<bool, String> {
    let int = |s: &str| {
        s.trim()
            .parse::<i64>()
            .map_err(|_| format!("Illegal number: {s}"))
    };
    Ok(match op {
        "=" => l == r,
        "!=" => l != r,
        "-a" => !l.is_empty() && !r.is_empty(),
        "-o" => !l.is_empty() || !r.is_empty(),
        _ => {
            let (a, b) = (int(l)?, int(r)?);
            match op {
                "-eq" => a == b,
                "-ne" => a != b,
                "-lt" => a < b,
                "-le" => a <= b,
                "-gt" => a > b,
                _ => a >= b,
            }
        }
    })
}

/// A printf integer argument: decimal, 0x hex, leading-0 octal, or 'c (character code).
/// Err carries the value of the valid prefix, which printf still prints.
fn parse_printf_int(s: &str) -> Result<i64, i64> {
    let t = s.trim();
    if let Some(c) = t.strip_prefix(['\'', '"']) {
        return Ok(c.chars().next().map_or(0, |c| c as i64));
    }
    let (neg, digits) = match t.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (radix, digits) = if let Some(h) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        (16, h)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (8, &digits[1..])
    } else {
        (10, digits)
    };
    let valid: String = digits.chars().take_while(|c| c.is_digit(radix)).collect();
    let value =
        i64::from_str_radix(&valid, radix).unwrap_or(if valid.is_empty() { 0 } else { i64::MAX });
    let value = if neg { -value } else { value };
    if !valid.is_empty() && valid.len() == digits.len() {
        Ok(value)
    } else {
        Err(value)
    }
}

/// Interprets one backslash escape (the text after the backslash): (text, chars used, stop).
/// `octal0` selects `%b` rules (`\0NNN`) over format rules (`\NNN`).
fn escape(rest: &[char], octal0: bool) -> (String, usize, bool) {
    let Some(&c) = rest.first() else {
        return ("\\".into(), 0, false);
    };
    let simple = match c {
        'n' => Some('\n'),
        't' => Some('\t'),
        'r' => Some('\r'),
        'a' => Some('\x07'),
        'b' => Some('\x08'),
        'f' => Some('\x0c'),
        'v' => Some('\x0b'),
        'e' => Some('\x1b'),
        '\\' => Some('\\'),
        '"' => Some('"'),
        '\'' => Some('\''),
        _ => None,
    };
    if let Some(s) = simple {
        return (s.to_string(), 1, false);
    }
    if c == 'c' {
        return (String::new(), 1, true);
    }
    let (skip, max) = if octal0 && c == '0' { (1, 3) } else { (0, 3) };
    let digits: String = rest[skip..]
        .iter()
        .take(max)
        .take_while(|d| d.is_digit(8))
        .collect();
    if !digits.is_empty() || skip == 1 {
        let value = u32::from_str_radix(&digits, 8).unwrap_or(0) & 0xff;
        let ch = char::from_u32(value).unwrap_or('\0');
        return (ch.to_string(), skip + digits.len(), false);
    }
    (format!("\\{c}"), 1, false)
}

/// All escapes in a `%b` argument: (text, stop).
fn escape_all(chars: &[char]) -> (String, usize, bool) {
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '\\' {
            let (text, used, stop) = escape(&chars[i + 1..], true);
            out.push_str(&text);
            if stop {
                return (out, i, true);
            }
            i += 1 + used;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    (out, i, false)
}

fn pad(s: &str, width: usize, left: bool) -> String {
    let len = s.chars().count();
    if len >= width {
        return s.to_string();
    }
    let fill = " ".repeat(width - len);
    if left {
        format!("{s}{fill}")
    } else {
        format!("{fill}{s}")
    }
}

fn pad_number(sign: &str, body: &str, width: usize, left: bool, zero: bool) -> String {
    let len = sign.len() + body.len();
    if len >= width {
        return format!("{sign}{body}");
    }
    let fill = width - len;
    match (left, zero) {
        (true, _) => format!("{sign}{body}{}", " ".repeat(fill)),
        (false, true) => format!("{sign}{}{body}", "0".repeat(fill)),
        (false, false) => format!("{}{sign}{body}", " ".repeat(fill)),
    }
}

/// Signal name without "SIG" for a `kill` argument (name in any case, with or without SIG, or
/// number). None if unknown.
fn signal_name(spec: &str) -> Option<&'static str> {
    if let Ok(n) = spec.parse::<usize>() {
        return SIGNALS.get(n).copied();
    }
    let upper = spec.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS[1..].iter().copied().find(|s| *s == bare)
}

/// A coreutils `sleep` operand: a non-negative decimal with an optional s/m/h/d suffix, or
/// "inf"/"infinity". Decimal fractions are exact (parsed as nanoseconds, not via f64).
fn parse_duration(arg: &str) -> Option<Duration> {
    let (number, unit) = match arg.char_indices().last()? {
        (i, 's') => (&arg[..i], 1u64),
        (i, 'm') => (&arg[..i], 60),
        (i, 'h') => (&arg[..i], 3600),
        (i, 'd') => (&arg[..i], 86400),
        _ => (arg, 1),
    };
    if matches!(number.to_ascii_lowercase().as_str(), "inf" | "infinity") {
        return Some(Duration::MAX);
    }
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let secs: u64 = if int.is_empty() {
        0
    } else {
        int.parse().unwrap_or(u64::MAX)
    };
    let mut nanos: u64 = 0;
    for (i, d) in frac.bytes().take(9).enumerate() {
        nanos += u64::from(d - b'0') * 10u64.pow(8 - i as u32);
    }
    let whole = Duration::from_secs(secs.saturating_mul(unit));
    let part = Duration::from_nanos(nanos.saturating_mul(unit));
    Some(whole.saturating_add(part))
}

/// Days since 1970-01-01 to (year, month 1-12, day 1-31) in the proleptic Gregorian calendar.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The `date +FORMAT` directives a script is likely to use, in UTC.
fn strftime(format: &str, unix: u64) -> String {
    const DAYS: [&str; 7] = [
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
    ];
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let secs = i64::try_from(unix).unwrap_or(i64::MAX);
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (h, m, s) = (tod / 3600, tod / 60 % 60, tod % 60);
    let weekday = (days + 4).rem_euclid(7) as usize;
    let yday = days - days_from_civil(year) + 1;
    let month_name = MONTHS[(month as usize).saturating_sub(1) % 12];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('s') => out.push_str(&unix.to_string()),
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", year.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('e') => out.push_str(&format!("{day:>2}")),
            Some('H') => out.push_str(&format!("{h:02}")),
            Some('M') => out.push_str(&format!("{m:02}")),
            Some('S') => out.push_str(&format!("{s:02}")),
            Some('N') => out.push_str("000000000"),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('F') => out.push_str(&format!("{year}-{month:02}-{day:02}")),
            Some('T') => out.push_str(&format!("{h:02}:{m:02}:{s:02}")),
            Some('R') => out.push_str(&format!("{h:02}:{m:02}")),
            Some('D') => out.push_str(&format!("{month:02}/{day:02}/{:02}", year.rem_euclid(100))),
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('b' | 'h') => out.push_str(&month_name[..3]),
            Some('B') => out.push_str(month_name),
            Some('u') => out.push_str(&(if weekday == 0 { 7 } else { weekday }).to_string()),
            Some('w') => out.push_str(&weekday.to_string()),
            Some('Z') => out.push_str("UTC"),
            Some('z') => out.push_str("+0000"),
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Days since 1970-01-01 of January 1st of `year`.
fn days_from_civil(year: i64) -> i64 {
    let y = year - 1;
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    // March-based day of era for January 1st (treated as month 11 of the previous year).
    let doy = (153 * 10 + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}
