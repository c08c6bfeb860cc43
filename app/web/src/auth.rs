//! Who may use the page: the board's credential file, sessions, CSRF tokens and the login rate
//! limit.
//!
//! - **Credentials.** At first start `STATE_DIR/credentials` is created (mode 0600, owned by the
//!   program's user, `O_EXCL`) with two users and random passwords: `viewer` (role `read`) and
//!   `engineer` (role `write`). Whoever commissions the board reads it as root
//!   (`sudo cat /var/lib/rtcat-web/credentials`) and may edit it (one `USER ROLE PASSWORD` per
//!   line). A file that others can read, or that another user owns, is refused at start.
//! - **Sessions.** A login gives a random 256-bit session id in an `HttpOnly; SameSite=Strict;
//!   Secure` cookie and a random CSRF token the page keeps in memory; both live on the server
//!   only (idle timeout [`IDLE`], at most [`MAX_AGE`]).
//! - **CSRF.** Every POST carries the session's token in `X-CSRF-Token` (compared in constant
//!   time); a cross-site form or fetch cannot read it, and SameSite=Strict keeps the cookie off
//!   cross-site requests in the first place (OWASP CSRF Prevention Cheat Sheet, "Synchronizer
//!   Token Pattern" and "SameSite Cookie Attribute").
//! - **Rate limit.** At most [`FAILS_PER_PEER`] failed logins per address and
//!   [`FAILS_TOTAL`] in all per [`WINDOW`]; beyond, 429 with `Retry-After`, and the password is
//!   not even compared.

use std::collections::{HashMap, VecDeque};
use std::fs::OpenOptions;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A session unused this long ends.
pub const IDLE: Duration = Duration::from_secs(30 * 60);
/// A session ends this long after the login, used or not.
pub const MAX_AGE: Duration = Duration::from_secs(12 * 3600);
/// Sessions at once (the oldest goes first beyond it).
pub const MAX_SESSIONS: usize = 256;
/// The rate limit's window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Failed logins of one address per [`WINDOW`].
pub const FAILS_PER_PEER: usize = 5;
/// Failed logins of all addresses per [`WINDOW`].
pub const FAILS_TOTAL: usize = 30;
/// The session cookie's name.
pub const COOKIE: &str = "rtcat_session";

/// What a user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Look.
    Read,
    /// Look and write (SDO writes, AL state).
    Write,
}

/// One line of the credential file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Login name.
    pub name: String,
    /// Role.
    pub role: Role,
    password: String,
}

/// Why the credential file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CredError {
    /// Reading, creating or inspecting it failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Others may read it, or another user owns it.
    #[error("{}: {why}", path.display())]
    Unsafe {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        #[source]
        why: UnsafeWhy,
    },
    /// A line that is not `USER ROLE PASSWORD`.
    #[error("{}:{line}: {message}", path.display())]
    Syntax {
        /// The path.
        path: PathBuf,
        /// Line number (1-based).
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// What is unsafe about a credential file.
#[derive(Debug, thiserror::Error)]
pub enum UnsafeWhy {
    /// Group or others have any permission.
    #[error("mode {0:04o} lets group or others read it (chmod 600)")]
    Mode(u32),
    /// Not owned by the program's user.
    #[error("owned by uid {owner}, not by uid {me} that runs rtcat-web")]
    Owner {
        /// The file's owner.
        owner: u32,
        /// Ours.
        me: u32,
    },
}

/// `n` random bytes from the kernel's generator.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // getrandom(2) does not fail on Linux ≥ 3.17 once the pool is initialised; it blocks until
    // then. A failure here would mean no secure randomness at all: nothing safe to do but stop.
    getrandom::fill(&mut b).expect("getrandom(2) failed: no secure random numbers on this system");
    b
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A password of 20 characters from a 32-letter alphabet without look-alikes (100 bits).
fn new_password() -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijkmnpqrstuvwxyz23456789";
    random_bytes::<20>()
        .iter()
        .map(|b| ALPHABET[usize::from(b & 31)] as char)
        .collect()
}

/// Equality in time that depends on the lengths only.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads the credential file at `path`, creating it with two new users if it does not exist.
/// Returns the users and whether the file was created now.
pub fn load_or_create(path: &Path) -> Result<(Vec<User>, bool), CredError> {
    let io = |source| CredError::Io {
        path: path.into(),
        source,
    };
    let mut created = false;
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut f) => {
            let text = format!(
                "# rtcat-web users: USER ROLE PASSWORD, ROLE read or write. Created at first start;\n\
                 # edit as root, then restart rtcat-web.\nviewer read {}\nengineer write {}\n",
                new_password(),
                new_password()
            );
            f.write_all(text.as_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
            created = true;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(e)),
    }
    let md = std::fs::metadata(path).map_err(io)?;
    let mode = md.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(CredError::Unsafe {
            path: path.into(),
            why: UnsafeWhy::Mode(mode),
        });
    }
    let me = nix::unistd::geteuid().as_raw();
    if md.uid() != me {
        return Err(CredError::Unsafe {
            path: path.into(),
            why: UnsafeWhy::Owner {
                owner: md.uid(),
                me,
            },
        });
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
    Ok((parse(path, &text)?, created))
}

/// Parses the credential file's text.
pub fn parse(path: &Path, text: &str) -> Result<Vec<User>, CredError> {
    let mut users: Vec<User> = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let syntax = |message: String| CredError::Syntax {
            path: path.into(),
            line: i + 1,
            message,
        };
        let f: Vec<&str> = l.split_whitespace().collect();
        let [name, role, password] = f[..] else {
            return Err(syntax(format!(
                "{} fields, expected USER ROLE PASSWORD",
                f.len()
            )));
        };
        let role = match role {
            "read" => Role::Read,
            "write" => Role::Write,
            r => return Err(syntax(format!("role {r:?}: must be read or write"))),
        };
        if name.len() > 32
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return Err(syntax(format!(
                "user {name:?}: 1..=32 of A-Z a-z 0-9 - _ ."
            )));
        }
        if password.len() < 12 {
            return Err(syntax(format!(
                "user {name}: password shorter than 12 characters"
            )));
        }
        if users.iter().any(|u| u.name == name) {
            return Err(syntax(format!("user {name} appears twice")));
        }
        users.push(User {
            name: name.into(),
            role,
            password: password.into(),
        });
    }
    if users.is_empty() {
        return Err(CredError::Syntax {
            path: path.into(),
            line: 0,
            message: "no users".into(),
        });
    }
    Ok(users)
}

/// A logged-in user.
#[derive(Debug, Clone)]
pub struct Session {
    /// Who.
    pub user: String,
    /// What they may do.
    pub role: Role,
    /// The CSRF token of the session.
    pub csrf: String,
    created: Instant,
    used: Instant,
}

/// Why a login was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum LoginError {
    /// Wrong user or password.
    Wrong,
    /// Too many failures: try again after this long.
    Limited(Duration),
}

/// Users, sessions and the rate limit.
pub struct Auth {
    users: Vec<User>,
    sessions: HashMap<String, Session>,
    fails: HashMap<IpAddr, VecDeque<Instant>>,
    fails_total: VecDeque<Instant>,
}

impl Auth {
    /// With these users.
    pub fn new(users: Vec<User>) -> Auth {
        Auth {
            users,
            sessions: HashMap::new(),
            fails: HashMap::new(),
            fails_total: VecDeque::new(),
        }
    }

    fn prune(&mut self, now: Instant) {
        let old = |q: &mut VecDeque<Instant>| {
            while q.front().is_some_and(|t| now.duration_since(*t) >= WINDOW) {
                q.pop_front();
            }
        };
        old(&mut self.fails_total);
        self.fails.retain(|_, q| {
            old(q);
            !q.is_empty()
        });
    }

    /// Logs `user` in from `peer`: the session id and the session.
    pub fn login(
        &mut self,
        peer: IpAddr,
        user: &str,
        password: &str,
        now: Instant,
    ) -> Result<(String, Session), LoginError> {
        self.prune(now);
        let peer_q = self.fails.get(&peer);
        let limited = |q: &VecDeque<Instant>| {
            WINDOW.saturating_sub(now.duration_since(*q.front().expect("a full queue")))
        };
        if let Some(q) = peer_q.filter(|q| q.len() >= FAILS_PER_PEER) {
            return Err(LoginError::Limited(limited(q)));
        }
        if self.fails_total.len() >= FAILS_TOTAL {
            return Err(LoginError::Limited(limited(&self.fails_total)));
        }
        // Every user's password is compared, so that the time does not tell which names exist.
        let mut found = None;
        for u in &self.users {
            let ok = ct_eq(u.password.as_bytes(), password.as_bytes());
            if ok && u.name == user {
                found = Some(u.clone());
            }
        }
        let Some(u) = found else {
            self.fails.entry(peer).or_default().push_back(now);
            self.fails_total.push_back(now);
            return Err(LoginError::Wrong);
        };
        self.fails.remove(&peer);
        if self.sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = self
                .sessions
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone())
        {
            self.sessions.remove(&oldest);
        }
        let id = hex(&random_bytes::<32>());
        let s = Session {
            user: u.name,
            role: u.role,
            csrf: hex(&random_bytes::<32>()),
            created: now,
            used: now,
        };
        self.sessions.insert(id.clone(), s.clone());
        Ok((id, s))
    }

    /// The live session of this id (its idle time restarts).
    pub fn session(&mut self, id: &str, now: Instant) -> Option<Session> {
        let s = self.sessions.get_mut(id)?;
        if now.duration_since(s.used) >= IDLE || now.duration_since(s.created) >= MAX_AGE {
            self.sessions.remove(id);
            return None;
        }
        s.used = now;
        Some(s.clone())
    }

    /// Whether the session of this id is live, without restarting its idle time (for the
    /// program's own checks, which must not keep a session alive).
    pub fn session_alive(&mut self, id: &str, now: Instant) -> Option<()> {
        let s = self.sessions.get(id)?;
        if now.duration_since(s.used) >= IDLE || now.duration_since(s.created) >= MAX_AGE {
            self.sessions.remove(id);
            return None;
        }
        Some(())
    }

    /// Ends a session.
    pub fn logout(&mut self, id: &str) {
        self.sessions.remove(id);
    }
}

/// The `Set-Cookie` value of a session id (`None`: the cookie that removes it).
pub fn cookie(id: Option<&str>) -> String {
    match id {
        Some(id) => format!(
            "{COOKIE}={id}; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age={}",
            MAX_AGE.as_secs()
        ),
        None => format!("{COOKIE}=; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=0"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn users() -> Vec<User> {
        parse(
            Path::new("c"),
            "# x\nviewer read aaaaaaaaaaaa\nengineer write bbbbbbbbbbbb\n",
        )
        .unwrap()
    }
    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn the_file_is_created_once_private_and_refused_when_others_can_read_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("credentials");
        let (u, created) = load_or_create(&p).unwrap();
        assert!(created);
        assert_eq!(u.len(), 2);
        assert_eq!((u[0].role, u[1].role), (Role::Read, Role::Write));
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let (again, created) = load_or_create(&p).unwrap();
        assert!(!created);
        assert_eq!(again, u, "a second start keeps the passwords");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = load_or_create(&p).unwrap_err().to_string();
        assert!(e.contains("mode 0640"), "{e}");
    }

    #[test]
    fn bad_lines_name_the_line() {
        for (text, want) in [
            ("viewer read", ":1: 2 fields"),
            ("\nviewer admin aaaaaaaaaaaa", ":2: role \"admin\""),
            ("viewer read short", "shorter than 12"),
            ("a read aaaaaaaaaaaa\na write bbbbbbbbbbbb", "appears twice"),
            ("b@d read aaaaaaaaaaaa", "user \"b@d\""),
            ("# only comments", "no users"),
        ] {
            let e = parse(Path::new("c"), text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn login_gives_a_session_with_its_role_and_a_csrf_token() {
        let mut a = Auth::new(users());
        let t = Instant::now();
        let (id, s) = a.login(A, "engineer", "bbbbbbbbbbbb", t).unwrap();
        assert_eq!((s.user.as_str(), s.role), ("engineer", Role::Write));
        assert_eq!((id.len(), s.csrf.len()), (64, 64));
        assert_ne!(id, s.csrf);
        assert_eq!(a.session(&id, t).unwrap().csrf, s.csrf);
        // Another user's password is no login.
        assert_eq!(
            a.login(A, "viewer", "bbbbbbbbbbbb", t).unwrap_err(),
            LoginError::Wrong
        );
        a.logout(&id);
        assert!(a.session(&id, t).is_none());
    }

    #[test]
    fn sessions_expire_when_idle() {
        let mut a = Auth::new(users());
        let t = Instant::now();
        let (id, _) = a.login(A, "viewer", "aaaaaaaaaaaa", t).unwrap();
        assert!(a.session(&id, t + IDLE / 2).is_some());
        // Looking does not keep it alive; using it does.
        assert!(a.session_alive(&id, t + IDLE).is_some());
        assert!(a.session_alive(&id, t + IDLE / 2 + IDLE).is_none());
        let (id, _) = a.login(A, "viewer", "aaaaaaaaaaaa", t).unwrap();
        assert!(a.session(&id, t + IDLE / 2 + IDLE).is_none());
        assert!(a.session("nonsense", t).is_none());
    }

    #[test]
    fn failed_logins_are_rate_limited_per_address_and_in_all() {
        let mut a = Auth::new(users());
        let t = Instant::now();
        for _ in 0..FAILS_PER_PEER {
            assert_eq!(
                a.login(A, "viewer", "wrong", t).unwrap_err(),
                LoginError::Wrong
            );
        }
        // Even the right password is refused now, with the time left.
        match a.login(A, "viewer", "aaaaaaaaaaaa", t + Duration::from_secs(10)) {
            Err(LoginError::Limited(d)) => assert_eq!(d, Duration::from_secs(50)),
            other => panic!("{other:?}"),
        }
        // Another address is not held up by A.
        assert!(a.login(B, "viewer", "aaaaaaaaaaaa", t).is_ok());
        // After the window, A may try again.
        assert!(a.login(A, "viewer", "aaaaaaaaaaaa", t + WINDOW).is_ok());
        // Many addresses: the total limit.
        let mut a = Auth::new(users());
        for i in 0..FAILS_TOTAL {
            let ip = IpAddr::V4(Ipv4Addr::new(10, 1, (i / 256) as u8, (i % 256) as u8));
            assert_eq!(a.login(ip, "x", "y", t).unwrap_err(), LoginError::Wrong);
        }
        assert!(matches!(
            a.login(B, "viewer", "aaaaaaaaaaaa", t),
            Err(LoginError::Limited(_))
        ));
    }

    #[test]
    fn constant_time_equality_is_equality() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure() {
        let c = cookie(Some("x"));
        for want in ["HttpOnly", "SameSite=Strict", "Secure", "Path=/"] {
            assert!(c.contains(want), "{c}");
        }
        assert!(cookie(None).contains("Max-Age=0"));
    }
}
