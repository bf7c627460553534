/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node's worker pool: ferry-worker processes started (posix_spawn, nothing inherited but
 * stdout and stderr), watched through a pidfd each (POLLIN on the loop: its death is seen at
 * once, then reaped with waitid(P_PIDFD)), recorded in the GCS workers table when they connect
 * and marked dead when they end, kept at the prestarted number and reaped when idle above it.
 * See rt_srv.c's DESIGN.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <ferry/gcs.h>

#include "common/util.h"
#include "common/alloc.h"
#include "common/log.h"
#include "node/node_int.h"
#include "node/rt_int.h"

#define COMP "node"
#define WORKER_EXE "ferry-worker"
/* Environment entries the node sets for a worker (replacing any it has itself). */
#define ENV_SET 7
#define ENV_BYTES (32 + 2 * 256) /* the longest: FERRY_WORKER_TOKEN, hex */

extern char **environ;

static void on_death(struct ferry__loop_req *req, int result);

/* ---- finding the executable ---- */

static bool executable(const char *path)
{
	return access(path, X_OK) == 0;
}

/* @name in directory @dir (@len bytes of it) then up @up levels, into @out if executable. */
static bool try_dir(const char *dir, size_t len, const char *up, char *out, size_t size)
{
	return snprintf(out, size, "%.*s/%s%s", (int)len, dir, up, WORKER_EXE) < (int)size &&
	       executable(out);
}

/* ferry-worker near @file (a program or a shared library): beside it, one level up (a build
 * tree: build/examples/prog, build/ferry-worker), or in the prefix's bin (installed:
 * lib/<multiarch>/libferry.so, bin/ferry-worker). */
static bool near(const char *file, char *out, size_t size)
{
	static const char *const ups[] = {"", "../", "../../bin/", "../bin/"};
	const char *slash = strrchr(file, '/');

	for (size_t i = 0; slash && i < FERRY_ARRAY_SIZE(ups); i++)
		if (try_dir(file, (size_t)(slash - file), ups[i], out, size))
			return true;
	return false;
}

/* An object of this module: dladdr() names the file it was loaded from. */
static const char module_anchor;

/* ferry-worker near the running executable, near the module that holds this code (libferry.so,
 * when a driver's local cluster runs the node), else in $PATH; "" if none. */
static void find_default(char *out, size_t size)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	const char *path = getenv("PATH");
	Dl_info info;

	if (n > 0) {
		self[n] = '\0';
		if (near(self, out, size))
			return;
	}
	if (dladdr(&module_anchor, &info) && info.dli_fname && info.dli_fname[0] == '/' &&
	    near(info.dli_fname, out, size))
		return;
	while (path && *path) {
		size_t len = strcspn(path, ":");

		if (len && try_dir(path, len, "", out, size))
			return;
		path += len + (path[len] == ':');
	}
	out[0] = '\0';
}

/* opts.worker_exe, else $FERRY_WORKER_EXE (either must be executable: -ENOENT), else the
 * default; none found: the node runs without workers (said at info). */
static int find_exe(struct ferry__node_rt *rt)
{
	const char *given = rt->node->opts.worker_exe;
	const char *from = "worker_exe";

	if (!given || !*given) {
		given = getenv("FERRY_WORKER_EXE");
		from = "$FERRY_WORKER_EXE";
	}
	if (given && *given) {
		if (strlen(given) >= sizeof(rt->exe) || !executable(given)) {
			FLOG_ERROR(COMP, "runtime: %s %s is not an executable file", from, given);
			return -ENOENT;
		}
		snprintf(rt->exe, sizeof(rt->exe), "%s", given);
		return 0;
	}
	find_default(rt->exe, sizeof(rt->exe));
	if (!rt->exe[0])
		FLOG_INFO(COMP,
			  "runtime: no %s near this program or libferry, or in PATH: no workers, "
			  "lease requests fail",
			  WORKER_EXE);
	return 0;
}

int ferry__rt_pool_start(struct ferry__node_rt *rt)
{
	const struct ferry__node_opts *o = &rt->node->opts;
	int64_t cpus = ferry__res_set_get(&rt->node->total, "CPU");
	uint32_t ncpu =
		cpus > 0
			? (uint32_t)((cpus + FERRY_GCS_RESOURCE_UNIT - 1) / FERRY_GCS_RESOURCE_UNIT)
			: 1;
	int r = find_exe(rt);

	if (r < 0)
		return r;
	rt->num_workers = o->num_workers < 0 ? 0 : o->num_workers ? (uint32_t)o->num_workers : ncpu;
	rt->max_workers = o->max_workers ? o->max_workers : 4 * ncpu;
	rt->num_workers = rt->num_workers < FERRY__NODE_MAX_WORKERS ? rt->num_workers
								    : FERRY__NODE_MAX_WORKERS;
	rt->max_workers = rt->max_workers < FERRY__NODE_MAX_WORKERS ? rt->max_workers
								    : FERRY__NODE_MAX_WORKERS;
	if (rt->max_workers < rt->num_workers)
		rt->max_workers = rt->num_workers;
	if (rt->max_workers < 1)
		rt->max_workers = 1;
	rt->idle_ms = o->worker_idle_ms ? o->worker_idle_ms : 10000;
	if (rt->exe[0])
		FLOG_INFO(COMP, "runtime: socket %s, workers %s: %u prestarted, at most %u",
			  rt->path, rt->exe, rt->num_workers, rt->max_workers);
	ferry__rt_pool_top_up(rt);
	return 0;
}

/* ---- starting ---- */

/* The worker's environment: the node's, without the entries it sets, then those. */
static char **worker_env(const struct rt_worker *w, char set[ENV_SET][ENV_BYTES])
{
	const struct ferry__node_rt *rt = w->rt;
	char id[2 * FERRY_UNIQUE_ID_SIZE + 1], secret[2 * FERRY__RT_SECRET_BYTES + 1];
	size_t n = 0, k = 0;
	char **env;

	while (environ && environ[n])
		n++;
	env = ferry__calloc(n + ENV_SET + 1, sizeof(*env));
	if (!env)
		return NULL;
	ferry_id_to_hex(w->id.bytes, sizeof(w->id.bytes), id, sizeof(id));
	ferry_id_to_hex(w->secret, sizeof(w->secret), secret, sizeof(secret));
	snprintf(set[0], ENV_BYTES, "FERRY_NODE_RUNTIME_SOCKET=%s", rt->path);
	snprintf(set[1], ENV_BYTES, "FERRY_NODE_STORE_SOCKET=%s", rt->node->socket_path);
	snprintf(set[2], ENV_BYTES, "FERRY_WORKER_ID=%s", id);
	snprintf(set[3], ENV_BYTES, "FERRY_WORKER_SECRET=%s", secret);
	/* Its owners' TCP endpoint (runtime/dial.h): the node's ip, behind the cluster token. */
	snprintf(set[4], ENV_BYTES, "FERRY_WORKER_IP=%s", rt->node->ip);
	memcpy(set[5], "FERRY_WORKER_TOKEN=", 19);
	ferry_id_to_hex(rt->node->token, rt->node->opts.token_len, set[5] + 19, ENV_BYTES - 19);
	snprintf(set[6], ENV_BYTES, "FERRY_NODE_PID=%d",
		 (int)getpid()); /* its death signal's check */
	for (size_t i = 0; i < n; i++) {
		bool ours = false;

		for (int j = 0; j < ENV_SET; j++)
			ours |= !strncmp(environ[i], set[j], strcspn(set[j], "=") + 1);
		if (!ours)
			env[k++] = environ[i];
	}
	for (int j = 0; j < ENV_SET; j++)
		env[k++] = set[j];
	return env;
}

/* posix_spawn with stdin from /dev/null, no fd above 2 inherited (whatever lacks O_CLOEXEC),
 * default signal dispositions and an empty mask (the node may ignore SIGPIPE or block some). */
static int spawn_process(struct rt_worker *w, pid_t *pid)
{
	char *const argv[] = {w->rt->exe, NULL};
	char set[ENV_SET][ENV_BYTES];
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t all, none;
	char **env = worker_env(w, set);
	int r;

	if (!env)
		return -ENOMEM;
	sigfillset(&all);
	sigdelset(&all, SIGKILL);
	sigdelset(&all, SIGSTOP);
	sigemptyset(&none);
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&attr);
	r = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	if (r == 0)
		r = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	if (r == 0)
		r = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	if (r == 0)
		r = posix_spawnattr_setsigmask(&attr, &none);
	if (r == 0)
		r = posix_spawnattr_setsigdefault(&attr, &all);
	if (r == 0)
		r = posix_spawn(pid, w->rt->exe, &fa, &attr, argv, env);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	ferry__free(env);
	return -r;
}

/* Watch @w's pidfd (one POLLIN: it becomes readable when the process ends). */
static int watch(struct rt_worker *w)
{
	w->death.data = w;
	return ferry__loop_poll(w->rt->loop, &w->death, w->pidfd, POLLIN, false, on_death);
}

static void link_worker(struct ferry__node_rt *rt, struct rt_worker *w)
{
	w->next = rt->workers;
	if (rt->workers)
		rt->workers->prev = w;
	rt->workers = w;
	rt->nworkers++;
	pthread_mutex_lock(&rt->node->lock);
	rt->alive++;
	pthread_mutex_unlock(&rt->node->lock);
}

int ferry__rt_pool_spawn(struct ferry__node_rt *rt)
{
	struct rt_worker *w;
	int r;

	if (rt->stopping || !rt->exe[0] || ferry__loop_now_ms() < rt->respawn_after_ms)
		return -EAGAIN;
	w = ferry__calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->rt = rt;
	w->pidfd = -1;
	ferry_worker_id_random(&w->id);
	r = getrandom(w->secret, sizeof(w->secret), 0) == sizeof(w->secret) ? 0 : -EIO;
	if (r == 0)
		r = spawn_process(w, &w->pid);
	if (r < 0) {
		FLOG_ERROR(COMP, "runtime: cannot start %s: %s", rt->exe, ferry_strerror(r));
		goto err_free;
	}
	w->pidfd = (int)syscall(SYS_pidfd_open, w->pid, 0);
	r = w->pidfd < 0 ? -errno : watch(w);
	if (r < 0) {
		FLOG_ERROR(COMP, "runtime: cannot watch worker %d: %s", (int)w->pid,
			   ferry_strerror(r));
		goto err_kill;
	}
	w->state = W_STARTING;
	w->started_ms = ferry__loop_now_ms();
	link_worker(rt, w);
	return 0;
err_kill:
	kill(w->pid, SIGKILL);
	(void)waitpid(w->pid, NULL, 0); /* it was just started: this returns at once */
	if (w->pidfd >= 0)
		close(w->pidfd);
err_free:
	rt->respawn_after_ms = ferry__loop_now_ms() + RT_RESPAWN_HOLD_MS;
	ferry__free(w);
	return r;
}

/* A worker ended before it connected (@how): hold the next start back, longer each time in a
 * row, and once it keeps happening fail the requests that wait for a worker, saying why. */
static void early_death(struct ferry__node_rt *rt, const char *how)
{
	uint32_t shift = rt->early_deaths < RT_RESPAWN_HOLD_MAX_SHIFT ? rt->early_deaths
								      : RT_RESPAWN_HOLD_MAX_SHIFT;
	char why[PATH_MAX + 256];

	rt->early_deaths++;
	rt->respawn_after_ms = ferry__loop_now_ms() + ((uint64_t)RT_RESPAWN_HOLD_MS << shift);
	if (rt->early_deaths < RT_EARLY_DEATHS_FAIL)
		return;
	snprintf(why, sizeof(why),
		 "workers started from %s end before they connect (%u in a row, the last %s): "
		 "is it ferry-worker? (ferry-node --worker-exe)",
		 rt->exe, rt->early_deaths, how);
	if (rt->early_deaths == RT_EARLY_DEATHS_FAIL || rt->queue)
		FLOG_ERROR(COMP, "runtime: %s", why);
	ferry__rt_lease_fail_waiting(rt, -ENOEXEC, why);
}

/* Workers not told to end. */
static uint32_t live_workers(const struct ferry__node_rt *rt)
{
	uint32_t n = 0;

	for (const struct rt_worker *w = rt->workers; w; w = w->next)
		n += !w->signal_sent;
	return n;
}

void ferry__rt_pool_top_up(struct ferry__node_rt *rt)
{
	for (uint32_t live = live_workers(rt); live < rt->num_workers; live++)
		if (ferry__rt_pool_spawn(rt) < 0)
			break;
}

uint32_t ferry__rt_pool_count(const struct ferry__node_rt *rt, enum rt_wstate state)
{
	uint32_t n = 0;

	for (const struct rt_worker *w = rt->workers; w; w = w->next)
		n += !w->signal_sent && w->state == state;
	return n;
}

struct rt_worker *ferry__rt_pool_find(struct ferry__node_rt *rt, const struct ferry_worker_id *id)
{
	for (struct rt_worker *w = rt->workers; w; w = w->next)
		if (!memcmp(w->id.bytes, id->bytes, sizeof(id->bytes)))
			return w;
	return NULL;
}

/* ---- the GCS record ---- */

/* The callbacks' argument: which call it was, for the log. */
static char gcs_add[] = "add", gcs_dead[] = "dead";

static void on_gcs_reply(void *arg, int status, void *result)
{
	const char *what = arg;

	ferry_gcs_free(result);
	if (status < 0 && status != -ECANCELED)
		FLOG_WARN(COMP, "runtime: GCS workers table: %s failed: %s", what,
			  ferry_strerror(status));
}

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void ferry__rt_pool_registered(struct rt_worker *w, struct rt_peer *p, const char *listen_path)
{
	struct ferry__node *node = w->rt->node;
	struct ferry_gcs_worker_info info = {0};
	char address[FERRY__NODE_ADDR_MAX];
	int r;

	w->peer = p;
	snprintf(w->listen_path, sizeof(w->listen_path), "%s", listen_path);
	w->state = W_IDLE;
	w->idle_ms = ferry__loop_now_ms();
	info.id = w->id;
	info.node = node->id;
	info.pid = (uint32_t)w->pid;
	info.address = ferry__node_rt_worker_address(node, w->listen_path, w->listen_port, address,
						     sizeof(address));
	info.state = FERRY_GCS_WORKER_ALIVE;
	info.start_ms = wall_ms();
	r = ferry_gcs_worker_add_async(node->gcs, &info, on_gcs_reply, gcs_add);
	w->registered = r == 0;
	w->rt->early_deaths = 0;
	if (r < 0)
		FLOG_WARN(COMP, "runtime: worker %d not recorded in the GCS: %s", (int)w->pid,
			  ferry_strerror(r));
	FLOG_DEBUG(COMP, "runtime: worker %d connected, serving %s", (int)w->pid, w->listen_path);
	ferry__rt_lease_serve(w->rt);
}

/* ---- ending ---- */

void ferry__rt_pool_signal(struct rt_worker *w, int sig, int exit_type, const char *why)
{
	if (w->pidfd < 0 || w->signal_sent == SIGKILL)
		return;
	if (why)
		FLOG_INFO(COMP, "runtime: ending worker %d (%s): %s", (int)w->pid,
			  sigabbrev_np(sig), why);
	if (!w->signal_sent) {
		w->exit_if_killed = exit_type;
		w->signal_ms = ferry__loop_now_ms();
	}
	w->signal_sent = sig;
	if (syscall(SYS_pidfd_send_signal, w->pidfd, sig, NULL, 0) < 0 && errno != ESRCH)
		FLOG_ERROR(COMP, "runtime: cannot signal worker %d: %s", (int)w->pid,
			   ferry_strerror(-errno));
}

void ferry__rt_pool_kill_all(struct ferry__node_rt *rt, int sig)
{
	for (struct rt_worker *w = rt->workers; w; w = w->next)
		ferry__rt_pool_signal(w, sig, FERRY_GCS_EXIT_NORMAL, NULL);
}

/* "killed by signal 9 (SIGKILL)" or "exited with status 3" */
static void describe(const siginfo_t *si, int *term_signal, int *exit_status, char *out,
		     size_t size)
{
	*term_signal = 0;
	*exit_status = 0;
	if (si->si_code == CLD_EXITED) {
		*exit_status = si->si_status;
		snprintf(out, size, "exited with status %d", si->si_status);
	} else if (si->si_code != CLD_KILLED && si->si_code != CLD_DUMPED) {
		snprintf(out, size, "ended (its status was collected elsewhere)");
	} else {
		const char *abbrev = sigabbrev_np(si->si_status);

		*term_signal = si->si_status;
		snprintf(out, size, "killed by signal %d (SIG%s)", si->si_status,
			 abbrev ? abbrev : "?");
	}
}

static int exit_type(const struct rt_worker *w, int term_signal, int exit_status)
{
	if (w->signal_sent)
		return w->exit_if_killed;
	return !term_signal && !exit_status ? FERRY_GCS_EXIT_NORMAL : FERRY_GCS_EXIT_ERROR;
}

static void unlink_worker(struct ferry__node_rt *rt, struct rt_worker *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		rt->workers = w->next;
	if (w->next)
		w->next->prev = w->prev;
	rt->nworkers--;
	pthread_mutex_lock(&rt->node->lock);
	rt->alive--;
	pthread_cond_broadcast(&rt->reaped);
	pthread_mutex_unlock(&rt->node->lock);
}

/* A worker ended by a signal could not remove its socket: the node does, if it is the path a
 * worker of that ID serves ("w-<id>.sock" beside the runtime socket), never another file. */
static void remove_socket(const struct rt_worker *w)
{
	char dir[sizeof(w->rt->path)], hex[FERRY_ID_HEX_MAX], want[2 * sizeof(dir)];

	if (!w->listen_path[0])
		return;
	snprintf(dir, sizeof(dir), "%s", w->rt->path);
	ferry_worker_id_to_hex(&w->id, hex, sizeof(hex));
	snprintf(want, sizeof(want), "%s/w-%s.sock", dirname(dir), hex);
	if (!strcmp(want, w->listen_path))
		unlink(w->listen_path);
}

/* @w ended (@si): logged, the GCS told, its lease revoked, then it is gone and replaced. */
static void reaped(struct rt_worker *w, const siginfo_t *si)
{
	struct ferry__node_rt *rt = w->rt;
	int term_signal, exit_status, r;
	char how[96];

	describe(si, &term_signal, &exit_status, how, sizeof(how));
	if (w->signal_sent)
		FLOG_DEBUG(COMP, "runtime: worker %d %s", (int)w->pid, how);
	else
		FLOG_WARN(COMP, "runtime: worker %d %s", (int)w->pid, how);
	if (w->registered) {
		r = ferry_gcs_worker_dead_async(rt->node->gcs, &w->id,
						exit_type(w, term_signal, exit_status), how,
						on_gcs_reply, gcs_dead);
		if (r < 0 && r != -ECANCELED)
			FLOG_WARN(COMP, "runtime: worker %d's death not recorded: %s", (int)w->pid,
				  ferry_strerror(r));
	} else if (!w->signal_sent && !rt->stopping) {
		early_death(rt, how); /* a broken executable? */
	}
	ferry__rt_lease_worker_gone(w, term_signal, exit_status, how);
	ferry__rt_owner_gone(rt, &w->id, false); /* what its tasks put */
	remove_socket(w);			 /* a killed worker's socket file stays */
	if (w->peer) {
		w->peer->worker = NULL;
		ferry__rt_peer_close(w->peer, NULL);
	}
	if (w->owner_peer) {
		w->owner_peer->owner_of = NULL;
		ferry__rt_peer_close(w->owner_peer, NULL);
	}
	unlink_worker(rt, w);
	ferry__free(w);
	ferry__rt_pool_top_up(rt);
	ferry__rt_lease_serve(rt);
}

static void on_death(struct ferry__loop_req *req, int result)
{
	struct rt_worker *w = req->data;
	siginfo_t si = {0};
	int r;

	if (result == -ECANCELED)
		return; /* the loop is being destroyed: ferry__node_rt_free() kills and reaps */
	r = result < 0 ? 0 : waitid(P_PIDFD, (id_t)w->pidfd, &si, WEXITED | WNOHANG);
	/* ECHILD: an embedding program reaped it (SIGCHLD ignored, or a waitpid(-1)). */
	if (result >= 0 && ((r == 0 && si.si_pid) || (r < 0 && errno == ECHILD))) {
		if (r < 0)
			memset(&si, 0, sizeof(si));
		close(w->pidfd);
		w->pidfd = -1;
		reaped(w, &si);
		return;
	}
	/* Not ended after all, or the poll failed: watch again, from the tick after a failure
	 * (a poll that keeps failing must not spin the loop). */
	if (result < 0 || watch(w) < 0) {
		FLOG_WARN(COMP, "runtime: watching worker %d: %s; again soon", (int)w->pid,
			  ferry_strerror(result < 0 ? result : -EAGAIN));
		w->rewatch = true;
	}
}

/* ---- the tick ---- */

void ferry__rt_pool_tick(struct ferry__node_rt *rt, uint64_t now)
{
	uint32_t live = live_workers(rt);

	for (struct rt_worker *w = rt->workers; w; w = w->next) {
		if (w->rewatch && w->pidfd >= 0)
			w->rewatch = watch(w) < 0;
		if (w->signal_sent == SIGTERM && now - w->signal_ms >= RT_KILL_GRACE_MS) {
			FLOG_WARN(COMP, "runtime: worker %d still alive 2 s after SIGTERM: SIGKILL",
				  (int)w->pid);
			ferry__rt_pool_signal(w, SIGKILL, w->exit_if_killed, NULL);
		} else if (w->signal_sent) {
			continue;
		} else if (w->state == W_STARTING && now - w->started_ms >= RT_CONNECT_TIMEOUT_MS) {
			ferry__rt_pool_signal(w, SIGKILL, FERRY_GCS_EXIT_ERROR,
					      "it did not connect within 10 s");
			live--;
		} else if (w->state == W_IDLE && live > rt->num_workers &&
			   now - w->idle_ms >= rt->idle_ms) {
			ferry__rt_pool_signal(w, SIGTERM, FERRY_GCS_EXIT_NORMAL, "idle");
			live--;
		}
	}
	if (!rt->stopping) {
		ferry__rt_pool_top_up(rt);
		ferry__rt_lease_serve(rt);
	}
}
