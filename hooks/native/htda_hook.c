/*
 * HTDA's job-router hooks as one small native program: the same protocol and
 * the same rules as htda/condor/hooks.py, without an interpreter's start-up
 * (~1 ms instead of ~15 ms), for submit hosts that route hundreds of jobs per
 * second.  Which hook it is comes from the name it is run under:
 * htda_translate, htda_update_job_info, htda_job_finalize, htda_job_cleanup.
 *
 * Built and installed by `hooks/install-hooks --native DIR`, which passes the
 * contract (settings file, socket, agent account, endpoints, the allow-list)
 * from htda/condor/hooks.py as -D definitions: it is written down once.
 *
 *   channel:   the submit agent's UNIX socket (`socket`), used only when its
 *              directory and the socket belong to root or `agent_user` and
 *              the directory is writable by no one else, and only when the
 *              process listening runs as one of them (SO_PEERCRED).  Hooks
 *              run as the job's owner: whoever answers chooses the job.
 *   translate: stdin = route ad line, "------", job ad.  POST it to the
 *              agent; its answer lists attributes to set.  Apply them only
 *              if each one it changes or adds is HTDA's (Rank, Requirements,
 *              JobMachineAttrs, JobPrio, HTDA_*); every other line of the job ad is
 *              printed byte for byte.  Anything else: the job ad unchanged.
 *   others:    POST stdin to the agent's events endpoint; print nothing.
 *   always:    exit 0 within `timeout` (a socket deadline, and SIGALRM as
 *              the last resort); output is written once (the alarm is
 *              blocked before the first byte); problems go to `log` (or
 *              stderr).  Out of memory reading the ad: print nothing (the
 *              router tries again later), never a part of the ad.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#if !defined(HTDA_CONFIG_PATH) || !defined(HTDA_SOCKET) || !defined(HTDA_AGENT_USER) || \
    !defined(HTDA_TRANSLATE_PATH) || !defined(HTDA_EVENTS_PATH) || !defined(HTDA_ALLOWED) || \
    !defined(HTDA_ALLOWED_PREFIX) || !defined(HTDA_TIMEOUT) || !defined(HTDA_MAX_AD_BYTES)
#error "build with hooks/install-hooks --native: it passes the contract from htda/condor/hooks.py"
#endif

static char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)] = HTDA_SOCKET;
static char agent_user[256] = HTDA_AGENT_USER;
static double timeout_s = HTDA_TIMEOUT;
static char log_path[1024] = "";
static long max_ad_bytes = HTDA_MAX_AD_BYTES;
static const char *hook_name = "translate";
static int is_translate = 1;

/* what the alarm handler echoes: set once stdin is read */
static const char *volatile echo_ptr = NULL;
static volatile size_t echo_len = 0;
static volatile sig_atomic_t output_started = 0;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

static void log_line(const char *fmt, ...) {
    char msg[1024], line[1200], stamp[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    time_t t = time(NULL);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", localtime(&t));
    int n = snprintf(line, sizeof line, "%s htda_%s[%d]: %s\n", stamp, hook_name, (int)getpid(), msg);
    if (n < 0) return;
    if ((size_t)n >= sizeof line) n = sizeof line - 1;
    int fd = log_path[0] ? open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666) : 2;
    if (fd < 0) return;
    write_all(fd, line, (size_t)n);
    if (fd != 2) close(fd);
}

/* The only way anything reaches standard output: once, with the alarm blocked and disarmed first,
 * so a router that reads slowly never gets the ad twice (or a late second copy cut short). */
static void emit(const char *p, size_t n) {
    sigset_t alarm_only;
    sigemptyset(&alarm_only);
    sigaddset(&alarm_only, SIGALRM);
    sigprocmask(SIG_BLOCK, &alarm_only, NULL);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    if (output_started) return;
    output_started = 1;
    write_all(1, p, n);
}

/* the protocol's "no change": the translate hook echoes the job ad, the others print nothing */
static void fail_open(void) {
    emit(is_translate && echo_ptr ? echo_ptr : "", is_translate && echo_ptr ? echo_len : 0);
}

static void on_alarm(int sig) {
    (void)sig;
    /* async-signal-safe: write(2) and _exit(2) only; emit() blocks this signal before it writes */
    static const char msg[] = "htda hook: deadline reached: left unchanged\n";
    if (!output_started && is_translate && echo_ptr) {
        output_started = 1;
        write_all(1, echo_ptr, echo_len);
    }
    if (!log_path[0]) write_all(2, msg, sizeof msg - 1);
    _exit(0);
}

/* -- settings ------------------------------------------------------------------------------------ */

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n')) *--e = 0;
    return s;
}

static void set_text(char *dst, size_t size, const char *value) {
    if (strlen(value) < size) snprintf(dst, size, "%s", value);
}

/* flat `key = value` settings; odd lines and unknown keys are ignored, never fatal */
static void load_settings(void) {
    const char *path = getenv("HTDA_HOOKS_CONFIG");
    path = path && path[0] ? path : HTDA_CONFIG_PATH;
    FILE *f = fopen(path, "re");
    if (!f) {
        if (errno != ENOENT) log_line("settings %s not read (%s): using the defaults", path, strerror(errno));
        return;
    }
    char line[2048];
    while (fgets(line, sizeof line, f)) {
        char *eq = strchr(line, '=');
        if (!eq || line[0] == '#') continue;
        *eq = 0;
        char *key = trim(line), *value = trim(eq + 1);
        char *hash = strstr(value, " #");
        if (hash) *hash = 0;
        value = trim(value);
        size_t n = strlen(value);
        int quoted = n >= 2 && (value[0] == '"' || value[0] == '\'') && value[n - 1] == value[0];
        if (quoted) {
            value[n - 1] = 0;
            value++;
        }
        char *end;
        if (!strcmp(key, "socket") && quoted) {
            set_text(socket_path, sizeof socket_path, value);
        } else if (!strcmp(key, "agent_user") && quoted) {
            set_text(agent_user, sizeof agent_user, value);
        } else if (!strcmp(key, "log") && quoted) {
            set_text(log_path, sizeof log_path, value);
        } else if (!strcmp(key, "timeout") && !quoted) {
            double t = strtod(value, &end);
            if (end != value && !*end && t > 0) timeout_s = t;
        } else if (!strcmp(key, "max_ad_bytes") && !quoted) {
            long m = strtol(value, &end, 10);
            if (end != value && !*end && m > 0) max_ad_bytes = m;
        }
    }
    fclose(f);
}

/* -- input ------------------------------------------------------------------------------------------- */

/* all of standard input; NULL when memory ran out (a part of the ad must never be printed) */
static char *read_stdin(size_t *len) {
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) return NULL;
    for (;;) {
        if (n == cap) {
            char *bigger = cap < ((size_t)-1) / 2 - 1 ? realloc(buf, cap * 2 + 1) : NULL;
            if (!bigger) {
                free(buf);
                return NULL;
            }
            buf = bigger;
            cap *= 2;
        }
        ssize_t r = read(0, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* the job ad: after a "------" line, or all of it */
static void job_part(const char *data, size_t len, const char **job, size_t *job_len) {
    static const char sep[] = "\n------\n";
    if (len >= 7 && !memcmp(data, "------\n", 7)) {
        *job = data + 7;
        *job_len = len - 7;
        return;
    }
    const char *hit = memmem(data, len, sep, sizeof sep - 1);
    if (hit) {
        *job = hit + sizeof sep - 1;
        *job_len = len - (size_t)(*job - data);
    } else {
        *job = data;
        *job_len = len;
    }
}

/* -- the channel to the agent ----------------------------------------------------------------------- */

static int trusted(uid_t uid) {
    static int looked_up = 0;
    static uid_t agent_uid = 0;  /* root's, until agent_user is found: then root and it */
    if (!looked_up) {
        struct passwd *pw = getpwnam(agent_user);
        if (pw) agent_uid = pw->pw_uid;
        looked_up = 1;
    }
    return uid == 0 || uid == agent_uid;
}

/* 0 when `path` is a `kind` (S_IFDIR or S_IFSOCK) owned by root or agent_user (a directory: writable by
 * no one else); else -1, logged.  lstat: a symbolic link is refused, not followed. */
static int check_path(const char *path, mode_t kind, const char *what) {
    struct stat st;
    if (lstat(path, &st) < 0) {
        log_line("%s %s: %s: left unchanged", what, path, strerror(errno));
        return -1;
    }
    if ((st.st_mode & S_IFMT) != kind) {
        log_line("%s %s is not a %s: left unchanged", what, path, kind == S_IFDIR ? "directory" : "socket");
        return -1;
    }
    if (!trusted(st.st_uid)) {
        log_line("%s %s belongs to uid %d, not to root or %s: left unchanged", what, path, (int)st.st_uid,
                 agent_user);
        return -1;
    }
    if (kind == S_IFDIR && (st.st_mode & 022)) {
        log_line("%s %s is writable by others (mode %o): left unchanged", what, path, st.st_mode & 07777);
        return -1;
    }
    return 0;
}

static int connect_agent(void) {
    char dir[sizeof socket_path];
    snprintf(dir, sizeof dir, "%s", socket_path);
    char *slash = strrchr(dir, '/');
    if (socket_path[0] != '/' || !slash) {
        log_line("socket '%s' is not an absolute path: left unchanged", socket_path);
        return -1;
    }
    if (slash == dir) slash[1] = 0; else *slash = 0;
    if (check_path(dir, S_IFDIR, "the socket's directory") < 0) return -1;
    if (check_path(socket_path, S_IFSOCK, "the agent's socket") < 0) return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, socket_path, strlen(socket_path));
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        log_line("cannot reach the agent at %s: %s: left unchanged", socket_path, strerror(errno));
        close(fd);
        return -1;
    }
    struct ucred peer = {0, (uid_t)-1, (gid_t)-1};
    socklen_t peer_len = sizeof peer;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) < 0 || !trusted(peer.uid)) {
        log_line("the process serving %s runs as uid %d, not as root or %s: left unchanged", socket_path,
                 (int)peer.uid, agent_user);
        close(fd);
        return -1;
    }
    return fd;
}

static int wait_fd(int fd, short events, double deadline) {
    for (;;) {
        int ms = (int)((deadline - now()) * 1000);
        if (ms <= 0) return 0;
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, ms);
        if (r < 0 && errno == EINTR) continue;
        return r > 0;
    }
}

static int send_all(int fd, const char *p, size_t n, double deadline) {
    while (n > 0) {
        if (!wait_fd(fd, POLLOUT, deadline)) return -1;
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* one HTTP/1.1 POST with Connection: close to the agent; the raw answer (malloc'd) or NULL */
static char *post(const char *path, const char *body, size_t body_len, double deadline, size_t *answer_len) {
    int fd = connect_agent();
    if (fd < 0) return NULL;
    char head[512];
    int head_len = snprintf(head, sizeof head,
                            "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\n"
                            "Content-Length: %zu\r\nConnection: close\r\n\r\n", path, body_len);
    if (send_all(fd, head, (size_t)head_len, deadline) < 0 || send_all(fd, body, body_len, deadline) < 0) {
        log_line("sending to the agent failed or took longer than %gs: left unchanged", timeout_s);
        close(fd);
        return NULL;
    }
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (buf && n == cap) {
            char *bigger = realloc(buf, cap * 2 + 1);
            if (!bigger) {
                free(buf);
                buf = NULL;
            } else {
                buf = bigger;
                cap *= 2;
            }
        }
        if (!buf) {
            log_line("out of memory reading the agent's answer: left unchanged");
            break;
        }
        if (!wait_fd(fd, POLLIN, deadline)) {
            log_line("no answer from the agent within %gs: left unchanged", timeout_s);
            free(buf);
            buf = NULL;
            break;
        }
        ssize_t r = recv(fd, buf + n, cap - n, 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (r < 0) {
            log_line("reading the agent's answer: %s: left unchanged", strerror(errno));
            free(buf);
            buf = NULL;
            break;
        }
        if (r == 0) {
            buf[n] = 0;
            *answer_len = n;
            break;
        }
        n += (size_t)r;
    }
    close(fd);
    return buf;
}

/* status and body of an HTTP answer; -1 when it is not one, or was cut short */
static int parse_answer(char *raw, size_t len, char **body, size_t *body_len) {
    char *end = memmem(raw, len, "\r\n\r\n", 4);
    if (!end || len < 12 || memcmp(raw, "HTTP/1.", 7)) return -1;
    *end = 0;
    *body = end + 4;
    *body_len = len - (size_t)(*body - raw);
    char *cl = strcasestr(raw, "\r\ncontent-length:");
    if (cl && strtoul(cl + 17, NULL, 10) != *body_len) return -1;
    return atoi(raw + 9);
}

/* -- the allow-list (as htda.condor.hooks.apply_answer) ------------------------------------------------ */

struct line {
    const char *text, *name, *value;  /* the raw line; name and value trimmed (NULL: not an assignment) */
    size_t len, name_len, value_len;
    int apply;                        /* answer lines: 1 = a change to print, 0 = repeats the job's own */
};

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

static void assignment(struct line *l) {
    const char *eq = memchr(l->text, '=', l->len), *end = l->text + l->len;
    l->name = l->value = NULL;
    if (!eq) return;
    const char *n = l->text, *ne = eq, *v = eq + 1, *ve = end;
    while (n < ne && is_space(*n)) n++;
    while (ne > n && is_space(ne[-1])) ne--;
    while (v < ve && is_space(*v)) v++;
    while (ve > v && is_space(ve[-1])) ve--;
    if (n == ne || v == ve || !(isalpha((unsigned char)*n) || *n == '_')) return;
    for (const char *p = n; p < ne; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_') || (unsigned char)*p > 127) return;
    if (ne - n == 1 && *n == '_') return;
    l->name = n;
    l->name_len = (size_t)(ne - n);
    l->value = v;
    l->value_len = (size_t)(ve - v);
}

/* the lines of p[0..n) split at '\n' (as Python's bytes.split(b"\n")); malloc'd, count in *count */
static struct line *split_lines(const char *p, size_t n, size_t *count) {
    size_t lines = 1;
    for (size_t i = 0; i < n; i++) lines += p[i] == '\n';
    struct line *out = calloc(lines, sizeof *out);
    if (!out) return NULL;
    for (size_t i = 0; i < lines; i++) {
        const char *nl = memchr(p, '\n', n);
        size_t len = nl ? (size_t)(nl - p) : n;
        out[i].text = p;
        out[i].len = len;
        assignment(&out[i]);
        p += len + (nl != NULL);
        n -= len + (nl != NULL);
    }
    *count = lines;
    return out;
}

static int same_name(const struct line *a, const struct line *b) {
    return a->name && b->name && a->name_len == b->name_len && !strncasecmp(a->name, b->name, a->name_len);
}

static int allowed(const struct line *l) {
    size_t prefix = strlen(HTDA_ALLOWED_PREFIX);
    if (l->name_len >= prefix && !strncasecmp(l->name, HTDA_ALLOWED_PREFIX, prefix)) return 1;
    const char *list = HTDA_ALLOWED;
    while (*list) {
        const char *comma = strchr(list, ',');
        size_t len = comma ? (size_t)(comma - list) : strlen(list);
        if (len == l->name_len && !strncasecmp(list, l->name, len)) return 1;
        list += len + (comma != NULL);
    }
    return 0;
}

/* brackets pair up and strings end (old syntax: \" inside a string is a quote): not a parser, but the
 * router drops a job from routing for good when a line of a hook's output does not parse */
static int balanced(const char *p, size_t n) {
    char stack[256];
    size_t depth = 0;
    int quoted = 0, escaped = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (quoted) {
            quoted = escaped || c != '"';
            escaped = !escaped && c == '\\';
        } else if (c == '"') {
            quoted = 1;
        } else if (c == '(' || c == '[' || c == '{') {
            if (depth == sizeof stack) return 0;
            stack[depth++] = c;
        } else if (c == ')' || c == ']' || c == '}') {
            char open = c == ')' ? '(' : c == ']' ? '[' : '{';
            if (!depth || stack[--depth] != open) return 0;
        }
    }
    return !quoted && !depth;
}

static int blank(const struct line *l) {
    for (size_t i = 0; i < l->len; i++)
        if (!is_space(l->text[i])) return 0;
    return 1;
}

/* check the answer against the job's lines; the number of changes, or -1 (logged) to refuse */
static long check_answer(struct line *job, size_t njob, struct line *ans, size_t nans) {
    long changes = 0;
    for (size_t i = 0; i < nans; i++) {
        if (blank(&ans[i])) continue;
        if (!ans[i].name) {
            log_line("the answer holds a line that is not 'Name = expression': left unchanged");
            return -1;
        }
        for (size_t k = 0; k < i; k++)
            if (same_name(&ans[k], &ans[i])) {
                log_line("the answer sets %.*s twice: left unchanged", (int)ans[i].name_len, ans[i].name);
                return -1;
            }
        const struct line *given = NULL;
        for (size_t j = 0; j < njob && !given; j++)
            if (same_name(&job[j], &ans[i])) given = &job[j];
        if (given && given->value_len == ans[i].value_len && !memcmp(given->value, ans[i].value, given->value_len))
            continue;  /* the job's own expression: no change */
        if (!allowed(&ans[i])) {
            log_line("the answer changes %.*s, which is not HTDA's to change: left unchanged",
                     (int)ans[i].name_len, ans[i].name);
            return -1;
        }
        if (!balanced(ans[i].value, ans[i].value_len)) {
            log_line("the answer's %.*s is not a complete expression: left unchanged", (int)ans[i].name_len,
                     ans[i].name);
            return -1;
        }
        ans[i].apply = 1;
        changes++;
    }
    return changes;
}

static char *put_line(char *out, const char *p, size_t n) {
    memcpy(out, p, n);
    out[n] = '\n';
    return out + n + 1;
}

static char *put_change(char *out, const struct line *l) {
    memcpy(out, l->name, l->name_len);
    memcpy(out + l->name_len, " = ", 3);
    return put_line(out + l->name_len + 3, l->value, l->value_len);
}

/* the job ad with the answer applied (malloc'd, length in *out_len); NULL to leave it unchanged */
static char *apply_answer(const char *job, size_t job_len, const char *answer, size_t answer_len, size_t *out_len) {
    size_t njob = 0, nans = 0;
    struct line *jl = split_lines(job, job_len, &njob), *al = split_lines(answer, answer_len, &nans);
    char *out = NULL;
    long changes = jl && al ? check_answer(jl, njob, al, nans) : -1;
    if (changes > 0 && (out = malloc(job_len + answer_len + 4 * (size_t)changes + 2))) {
        char *p = out;
        if (njob && jl[njob - 1].len == 0) njob--;  /* the job's final newline: written after the additions */
        for (size_t j = 0; j < njob; j++) {
            struct line *change = NULL;
            for (size_t i = 0; i < nans && !change; i++)
                if (al[i].apply == 1 && same_name(&al[i], &jl[j])) change = &al[i];
            if (change) {
                p = put_change(p, change);
                change->apply = 2;  /* written in place */
            } else {
                p = put_line(p, jl[j].text, jl[j].len);
            }
        }
        for (size_t i = 0; i < nans; i++)
            if (al[i].apply == 1) p = put_change(p, &al[i]);
        *out_len = (size_t)(p - out);
    } else if (changes == 0 && (out = malloc(job_len + 1))) {
        memcpy(out, job, job_len);
        *out_len = job_len;
    } else if (changes > 0) {
        log_line("out of memory applying the answer: left unchanged");
    }
    free(jl);
    free(al);
    return out;
}

/* -- the hooks ------------------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
    (void)argc;
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    const char *endpoint = HTDA_TRANSLATE_PATH;
    if (strstr(base, "update_job_info")) {
        hook_name = "update_job_info";
        endpoint = HTDA_EVENTS_PATH "?hook=update";
    } else if (strstr(base, "job_finalize") || strstr(base, "job_exit")) {
        hook_name = "job_finalize";
        endpoint = HTDA_EVENTS_PATH "?hook=finalize";
    } else if (strstr(base, "job_cleanup")) {
        hook_name = "job_cleanup";
        endpoint = HTDA_EVENTS_PATH "?hook=cleanup";
    }
    is_translate = !strcmp(hook_name, "translate");

    load_settings();
    double deadline = now() + timeout_s;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 0}, {(time_t)timeout_s, (suseconds_t)((timeout_s - (time_t)timeout_s) * 1e6)}};
    setitimer(ITIMER_REAL, &it, NULL);

    size_t len = 0;
    char *data = read_stdin(&len);
    if (!data) {
        log_line("out of memory reading the job ad: printed nothing (the router tries again later)");
        emit("", 0);
        return 0;
    }
    const char *job;
    size_t job_len;
    job_part(data, len, &job, &job_len);
    echo_len = job_len;
    echo_ptr = job;
    if ((long)len > max_ad_bytes) {
        log_line("ad of %zu bytes is over max_ad_bytes=%ld: left unchanged", len, max_ad_bytes);
        fail_open();
        return 0;
    }
    size_t answer_len = 0;
    char *answer = post(endpoint, data, len, deadline, &answer_len);
    char *body = NULL;
    size_t body_len = 0;
    int status = answer ? parse_answer(answer, answer_len, &body, &body_len) : -1;
    if (answer && status != 200) log_line("agent answered HTTP %d%s", status, is_translate ? ": left unchanged" : "");
    if (!is_translate || status != 200) {
        fail_open();
        return 0;
    }
    size_t out_len = 0;
    char *out = apply_answer(job, job_len, body, body_len, &out_len);
    if (!out) {
        fail_open();
        return 0;
    }
    emit(out, out_len);
    return 0;
}
