/* SPDX-License-Identifier: Apache-2.0 */
/*
 * WorkerAssign: a worker loads its job's code, a shared library (docs/architecture.md,
 * "runtime"), checks it against the hash the driver recorded, and runs the job's worker setup
 * function once. A worker serves one job in its life: a library cannot be unloaded once its
 * functions are registered.
 *
 * The file is opened once, hashed through that fd and loaded through /proc/self/fd: what runs
 * is what was hashed, even if the path is replaced in between.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sha256.h"
#include "common/wire.h"
#include "runtime/registry.h"
#include "runtime/worker.h"

#define COMP "worker"

struct assign {
	struct ferry__worker *w; /* the worker */
	const char *path;	 /* the library (NUL-terminated, checked) */
	char *msg;		 /* the reply's message */
	size_t msg_size;	 /* its room */
};

__attribute__((format(printf, 3, 4))) static int say(struct assign *a, int status, const char *fmt,
						     ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(a->msg, a->msg_size, fmt, ap);
	va_end(ap);
	return status;
}

static void hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* Hash the library open at @fd (its @size bytes as stat says: a /proc or device file cannot
 * make the worker read forever) and compare with @want. */
static int check_hash(struct assign *a, int fd, const uint8_t *want)
{
	uint8_t got[FERRY_SHA256_SIZE];
	char got_hex[2 * FERRY_SHA256_SIZE + 1], want_hex[2 * FERRY_SHA256_SIZE + 1];
	struct ferry__sha256 s;
	uint8_t buf[16384];
	struct stat st;
	off_t off = 0;

	if (fstat(fd, &st) < 0)
		return say(a, -errno, "cannot stat the job's library %s: %s", a->path,
			   ferry_strerror(-errno));
	if (!S_ISREG(st.st_mode))
		return say(a, -EINVAL, "the job's library %s is not a regular file", a->path);
	ferry__sha256_init(&s);
	while (off < st.st_size) {
		size_t want_n = st.st_size - off < (off_t)sizeof(buf) ? (size_t)(st.st_size - off)
								      : sizeof(buf);
		ssize_t n = pread(fd, buf, want_n, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return say(a, n < 0 ? -errno : -EIO, "cannot read the job's library %s: %s",
				   a->path, n < 0 ? ferry_strerror(-errno) : "short file");
		ferry__sha256_update(&s, buf, (size_t)n);
		off += n;
	}
	ferry__sha256_final(&s, got);
	if (memcmp(got, want, sizeof(got)) == 0)
		return 0;
	hex(got, sizeof(got), got_hex);
	hex(want, sizeof(got), want_hex);
	return say(a, -EBADMSG,
		   "the job's library %s does not match the job's code hash (sha256 %s, the job's "
		   "%s): was it changed after the job started?",
		   a->path, got_hex, want_hex);
}

/* dlopen the library at @fd; its FERRY_FUNCTIONs register as it loads. */
static int load(struct assign *a, int fd)
{
	char conflict[FERRY_FUNCTION_NAME_MAX + 1], proc[64];
	void *handle;
	const char *why;
	size_t n;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	handle = dlopen(access(proc, F_OK) == 0 ? proc : a->path, RTLD_NOW | RTLD_LOCAL);
	if (!handle) {
		why = dlerror();
		why = why ? why : "unknown error";
		n = strlen(proc);
		if (!strncmp(why, proc, n) && !strncmp(why + n, ": ", 2))
			why += n + 2; /* the path is named already */
		return say(a, -ENOEXEC, "cannot load the job's library %s: %s", a->path, why);
	}
	/* Never dlclose: its functions stay registered (runtime.h). */
	ferry__registry_conflict(conflict, sizeof(conflict));
	if (conflict[0])
		return say(a, -EEXIST,
			   "the job's library %s registers function '%s' twice, to two different "
			   "functions: rename one",
			   a->path, conflict);
	return 0;
}

/* Run the job's worker setup function, if it has one. */
static int run_setup(struct assign *a)
{
	char name[2 * FERRY_FUNCTION_NAME_MAX + 8], said[512];
	ferry_setup_fn fn;
	int ret = ferry__worker_setup_find(&fn, name, sizeof(name));

	if (ret < 0)
		return say(a, ret, "the job's library %s registers two worker setup functions (%s)",
			   a->path, name);
	if (!fn)
		return 0;
	ret = fn();
	if (ret == 0)
		return 0;
	ret = ret < 0 ? ret : -EINVAL;
	ferry__worker_setup_message(said, sizeof(said));
	return say(a, ret, "worker setup function '%s' of the job's library %s failed: %s", name,
		   a->path, said[0] ? said : ferry_strerror(ret));
}

static int assign_job(struct assign *a, struct ferry__wire_worker_assign_view v)
{
	uint32_t path_len = ferry__wire_worker_assign_code_path_len(v);
	int fd, ret;

	if (!a->path || !path_len || strlen(a->path) != path_len)
		return say(a, -EINVAL, "WorkerAssign without a code_path");
	if (ferry__wire_worker_assign_code_hash_count(v) != FERRY_SHA256_SIZE)
		return say(a, -EINVAL, "the job's code hash for %s is %u bytes, not a SHA-256 (32)",
			   a->path, ferry__wire_worker_assign_code_hash_count(v));
	fd = open(a->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return say(a, -errno, "cannot open the job's library %s: %s", a->path,
			   ferry_strerror(-errno));
	ret = check_hash(a, fd, ferry__wire_worker_assign_code_hash_data(v));
	if (ret == 0)
		ret = load(a, fd);
	close(fd);
	if (ret == 0)
		ret = run_setup(a);
	return ret;
}

int ferry__worker_assign(struct ferry__worker *w, const void *payload, size_t len)
{
	struct ferry__wire_worker_assign_view v = ferry__wire_worker_assign_root_verified(payload);
	struct ferry__wire_unique_id job = ferry__wire_worker_assign_job(v);
	struct ferry__wire_worker_assign_reply m = {.job = job};
	struct assign a = {w, ferry__wire_worker_assign_code_path(v), w->assign_message,
			   sizeof(w->assign_message)};
	char busy[256], job_hex[FERRY_ID_HEX_MAX];

	(void)len;
	if (!w->assigned) {
		w->assign_message[0] = 0;
		w->assign_status = assign_job(&a, v);
		w->assigned = true;
		memcpy(w->job.bytes, job.bytes, sizeof(job.bytes));
		ferry_job_id_to_hex(&w->job, job_hex, sizeof(job_hex));
		if (w->assign_status < 0)
			FLOG_ERROR(COMP, "worker %s: job %s not loaded: %s", w->id_hex, job_hex,
				   w->assign_message);
		else
			FLOG_INFO(COMP, "worker %s: job %s loaded from %s", w->id_hex, job_hex,
				  a.path);
		/* Its tasks may submit tasks: a failure here is logged and leaves them -ENOTCONN. */
		if (w->assign_status == 0)
			(void)ferry__worker_owner_start(
				w, a.path, ferry__wire_worker_assign_code_hash_data(v));
	} else if (memcmp(job.bytes, w->job.bytes, sizeof(job.bytes)) != 0) {
		ferry_job_id_to_hex(&w->job, job_hex, sizeof(job_hex));
		snprintf(busy, sizeof(busy), "worker %s serves job %s: a worker serves one job",
			 w->id_hex, job_hex);
		FLOG_WARN(COMP, "%s (a WorkerAssign for another job refused)", busy);
		m.status = -EBUSY;
		m.message = busy;
		return ferry__wire_worker_assign_reply_build(&w->fb, &m);
	}
	/* The same job again: the first answer, whatever it was. */
	m.status = w->assign_status;
	m.message = w->assign_status < 0 ? w->assign_message : NULL;
	return ferry__wire_worker_assign_reply_build(&w->fb, &m);
}
