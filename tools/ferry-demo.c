/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-demo: the object store at work, in about ten seconds. Starts a ferry-plasma process,
 * runs several client processes that put objects and read each other's (waiting for those not
 * sealed yet), moves one large object through shared memory, spills it to disk and reads it
 * back, then prints what happened with the figures beside this machine's own limits (memcpy
 * into shared memory, a Unix-socket round trip). Everything it starts is stopped and removed.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ferry/plasma.h>

#include "common/version.h"

#define MIB (1ull << 20)
#define PROCS 4
#define SMALL_PER_PROC 2000
#define SMALL_SIZE 64
#define LARGE_SIZE (256 * MIB)
#define TRIES 3 /* large copies: the best of a few (the machine may be busy) */

struct demo {
	char dir[64];	/* private temp directory: socket, log, spill files */
	char sock[128]; /* store socket */
	char log[128];	/* store's stderr */
	pid_t store;	/* ferry-plasma */
};

/* What one client process reports. */
struct report {
	double put_p50_us; /* create + write + seal, small objects */
	double get_p50_us; /* get + release of the others' small objects */
	uint64_t objects;  /* objects it read back, verified */
	int ok;		   /* 1 if every byte matched */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double p50_us(uint64_t *ns, size_t n)
{
	qsort(ns, n, sizeof(*ns), cmp_u64);
	return n ? (double)ns[n / 2] / 1e3 : 0;
}

static struct ferry_object_id oid(uint32_t proc, uint32_t n)
{
	struct ferry_object_id id;

	memset(id.bytes, 0xd3, sizeof(id.bytes));
	memcpy(id.bytes, &n, sizeof(n));
	memcpy(id.bytes + 4, &proc, sizeof(proc));
	return id;
}

/* ---- the store process ---- */

static int store_start(struct demo *d)
{
	char self[PATH_MAX], bin[PATH_MAX + 16], line[256], spill[160];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int out[2], logfd;
	FILE *f;

	if (n < 0)
		return -errno;
	self[n] = '\0';
	snprintf(bin, sizeof(bin), "%s/ferry-plasma", dirname(self));
	if (getenv("FERRY_PLASMA_BIN"))
		snprintf(bin, sizeof(bin), "%s", getenv("FERRY_PLASMA_BIN"));
	snprintf(spill, sizeof(spill), "%s/spill", d->dir);
	if (pipe(out) < 0)
		return -errno;
	logfd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	d->store = fork();
	if (d->store == 0) {
		dup2(out[1], 1);
		dup2(logfd, 2);
		execl(bin, bin, "--socket", d->sock, "--memory", "1G", "--spill-dir", spill,
		      (char *)NULL);
		fprintf(stderr, "cannot run %s: %s\n", bin, ferry_strerror(errno));
		_exit(127);
	}
	close(out[1]);
	close(logfd);
	f = fdopen(out[0], "r");
	if (d->store < 0 || !f || !fgets(line, sizeof(line), f)) {
		fprintf(stderr, "ferry-demo: ferry-plasma did not start (%s)\n", bin);
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	printf("  started   %s", line);
	return 0;
}

static void store_stop(struct demo *d)
{
	struct stat st;
	int status = 0;

	if (d->store <= 0)
		return;
	kill(d->store, SIGTERM);
	waitpid(d->store, &status, 0);
	printf("  stopped   ferry-plasma: exit %d, socket %s\n",
	       WIFEXITED(status) ? WEXITSTATUS(status) : -1,
	       stat(d->sock, &st) == 0 ? "LEFT BEHIND" : "removed");
	d->store = 0;
}

/* ---- client processes ---- */

static void put_small(struct ferry_plasma_client *c, uint32_t proc, uint64_t *lat)
{
	for (uint32_t n = 0; n < SMALL_PER_PROC; n++) {
		struct ferry_object_id id = oid(proc, n);
		uint64_t t0 = now_ns();
		void *buf;

		if (ferry_plasma_client_create(c, &id, SMALL_SIZE, NULL, 0, &buf) < 0)
			_exit(2);
		memset(buf, (int)(proc * 31 + n), SMALL_SIZE);
		ferry_plasma_client_seal(c, &id);
		lat[n] = now_ns() - t0;
	}
}

/* Read everybody else's objects (waiting for them if needed) and check every byte. */
static void get_others(struct ferry_plasma_client *c, uint32_t proc, uint64_t *lat,
		       struct report *r)
{
	size_t k = 0;

	r->ok = 1;
	for (uint32_t p = 0; p < PROCS; p++) {
		for (uint32_t n = 0; p != proc && n < SMALL_PER_PROC; n++) {
			struct ferry_object_id id = oid(p, n);
			struct ferry_plasma_view v;
			uint64_t t0 = now_ns();
			const uint8_t *b;

			if (ferry_plasma_client_get(c, &id, 1, 10000, &v) < 0) {
				r->ok = 0;
				continue;
			}
			b = v.data;
			for (size_t i = 0; i < v.data_size; i++)
				r->ok &= b[i] == (uint8_t)(p * 31 + n);
			ferry_plasma_client_release(c, &v);
			lat[k++] = now_ns() - t0;
			r->objects++;
		}
	}
	r->get_p50_us = p50_us(lat, k);
}

static void client_main(const struct demo *d, uint32_t proc, int out)
{
	struct ferry_plasma_connect_opts o = {.name = "demo", .wait_ms = 5000};
	uint64_t *lat = calloc(PROCS * SMALL_PER_PROC, sizeof(*lat));
	struct ferry_plasma_client *c;
	struct report r = {0};

	if (!lat || ferry_plasma_client_connect(d->sock, &o, &c) < 0)
		_exit(1);
	put_small(c, proc, lat);
	r.put_p50_us = p50_us(lat, SMALL_PER_PROC);
	get_others(c, proc, lat, &r);
	ferry_plasma_client_disconnect(c);
	free(lat);
	if (write(out, &r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(1);
	_exit(0);
}

static int run_clients(const struct demo *d)
{
	struct report all[PROCS];
	int out[2], failed = 0;
	pid_t pids[PROCS];

	if (pipe(out) < 0)
		return -1;
	for (uint32_t p = 0; p < PROCS; p++) {
		pids[p] = fork();
		if (pids[p] == 0)
			client_main(d, p, out[1]);
	}
	close(out[1]);
	for (uint32_t p = 0; p < PROCS; p++) {
		int status;

		waitpid(pids[p], &status, 0);
		failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	}
	for (uint32_t p = 0; p < PROCS && !failed; p++)
		failed |= read(out[0], &all[p], sizeof(all[p])) != (ssize_t)sizeof(all[p]);
	close(out[0]);
	if (failed) {
		fprintf(stderr, "ferry-demo: a client process failed\n");
		return -1;
	}
	printf("\n  %d processes each put %d objects of %d B and read the other %d x %d back:\n",
	       PROCS, SMALL_PER_PROC, SMALL_SIZE, PROCS - 1, SMALL_PER_PROC);
	for (uint32_t p = 0; p < PROCS; p++)
		printf("    process %u: put p50 %6.2f us   get+release p50 %6.2f us   %" PRIu64
		       " objects read, bytes %s\n",
		       p, all[p].put_p50_us, all[p].get_p50_us, all[p].objects,
		       all[p].ok ? "all correct" : "WRONG");
	return 0;
}

/* ---- limits of this machine ---- */

static double memcpy_gbps(const void *src, uint64_t size)
{
	int fd = memfd_create("ferry-demo", 0);
	double s, best = 0;
	void *dst;
	uint64_t t0;

	if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
		return 0;
	dst = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	close(fd);
	if (dst == MAP_FAILED)
		return 0;
	memset(dst, 0, size);
	for (int i = 0; i < TRIES; i++) {
		t0 = now_ns();
		memcpy(dst, src, size);
		s = (double)(now_ns() - t0) / 1e9;
		best = i && best < s ? best : s;
	}
	munmap(dst, size);
	return (double)size / best / 1e9;
}

static double uds_rtt_us(void)
{
	uint64_t lat[2000];
	char buf[64] = {0};
	int sv[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return 0;
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		while (read(sv[1], buf, sizeof(buf)) == (ssize_t)sizeof(buf) &&
		       write(sv[1], buf, sizeof(buf)) == (ssize_t)sizeof(buf))
			;
		_exit(0);
	}
	close(sv[1]);
	for (int i = 0; i < 2000; i++) {
		uint64_t t0 = now_ns();

		if (write(sv[0], buf, sizeof(buf)) != (ssize_t)sizeof(buf) ||
		    read(sv[0], buf, sizeof(buf)) != (ssize_t)sizeof(buf))
			break;
		lat[i] = now_ns() - t0;
	}
	close(sv[0]);
	waitpid(pid, NULL, 0);
	return p50_us(lat, 2000);
}

/* ---- one large object: put, spill, restore ---- */

static int large_object(const struct demo *d, const uint8_t *src, double memcpy_rate)
{
	struct ferry_plasma_connect_opts o = {.name = "demo-large",
					      .flags = FERRY_PLASMA_CONNECT_POPULATE};
	struct ferry_object_id id = oid(99, 0);
	struct ferry_plasma_client *c;
	struct ferry_plasma_view v;
	uint64_t t0, freed = 0;
	double put_s = 0, spill_s, restore_s;
	void *buf;
	int r = 0;

	if (ferry_plasma_client_connect(d->sock, &o, &c) < 0)
		return -1;
	/* The best of a few puts; the last one stays for the spill. */
	for (int i = 0; i < TRIES && r == 0; i++) {
		double s;

		if (i)
			ferry_plasma_client_delete(c, &id, 1, NULL);
		t0 = now_ns();
		r = ferry_plasma_client_create(c, &id, LARGE_SIZE, NULL, 0, &buf);
		if (r == 0) {
			memcpy(buf, src, LARGE_SIZE);
			r = ferry_plasma_client_seal(c, &id);
		}
		s = (double)(now_ns() - t0) / 1e9;
		put_s = i && put_s < s ? put_s : s;
	}
	t0 = now_ns();
	if (r == 0)
		r = ferry_plasma_client_evict(c, LARGE_SIZE, &freed);
	spill_s = (double)(now_ns() - t0) / 1e9;
	t0 = now_ns();
	if (r >= 0)
		r = ferry_plasma_client_get(c, &id, 1, 0, &v);
	restore_s = (double)(now_ns() - t0) / 1e9;
	if (r == 0) {
		r = memcmp(v.data, src, LARGE_SIZE) ? -EIO : 0;
		ferry_plasma_client_release(c, &v);
	}
	ferry_plasma_client_delete(c, &id, 1, NULL);
	ferry_plasma_client_disconnect(c);
	if (r < 0) {
		fprintf(stderr, "ferry-demo: large object: %s\n", ferry_strerror(r));
		return -1;
	}
	printf("\n  one object of %llu MiB:\n", (unsigned long long)(LARGE_SIZE / MIB));
	printf("    put (create + write + seal) %6.2f GB/s   (memcpy into shared memory: %.2f "
	       "GB/s, ratio %.2f)\n",
	       LARGE_SIZE / put_s / 1e9, memcpy_rate, LARGE_SIZE / put_s / 1e9 / memcpy_rate);
	printf("    spilled to disk             %6.2f GB/s   (%llu MiB freed in the arena)\n",
	       LARGE_SIZE / spill_s / 1e9, (unsigned long long)(freed / MIB));
	printf("    read back by get            %6.2f GB/s   bytes %s\n",
	       LARGE_SIZE / restore_s / 1e9, "all correct");
	return 0;
}

/* ---- main ---- */

static void show_log(const struct demo *d)
{
	char line[512];
	FILE *f = fopen(d->log, "r");

	fprintf(stderr, "ferry-demo: failed; the store's log:\n");
	while (f && fgets(line, sizeof(line), f))
		fputs(line, stderr);
	if (f)
		fclose(f);
}

static void cleanup_dir(const struct demo *d)
{
	char spill[160];

	snprintf(spill, sizeof(spill), "%s/spill", d->dir);
	rmdir(spill);
	unlink(d->log);
	unlink(d->sock);
	rmdir(d->dir);
}

static const char demo_usage[] =
	"usage: ferry-demo [--help | --version]\n"
	"Starts a private ferry-plasma store and client processes, moves objects through it and\n"
	"prints what happened beside this machine's own limits. Takes about ten seconds.\n";

int main(int argc, char **argv)
{
	struct demo d = {0};
	uint8_t *src;
	double mc, rtt;
	int rc = 1;

	if (argc > 1)
		return ferry__args_none(argc, argv, "ferry-demo", demo_usage);

	snprintf(d.dir, sizeof(d.dir), "/tmp/ferry-demo-XXXXXX");
	if (!mkdtemp(d.dir)) {
		perror("ferry-demo: mkdtemp");
		return 1;
	}
	snprintf(d.sock, sizeof(d.sock), "%s/plasma.sock", d.dir);
	snprintf(d.log, sizeof(d.log), "%s/plasma.log", d.dir);
	src = malloc(LARGE_SIZE);
	if (!src)
		goto out;
	for (uint64_t i = 0; i < LARGE_SIZE; i++)
		src[i] = (uint8_t)(i * 7 + 3);
	printf("ferry demo: the zero-copy object store (ferry-plasma) with %d client processes\n\n",
	       PROCS);
	if (store_start(&d) < 0)
		goto out;
	mc = memcpy_gbps(src, LARGE_SIZE);
	rtt = uds_rtt_us();
	if (run_clients(&d) == 0 && large_object(&d, src, mc) == 0)
		rc = 0;
	printf("\n  for scale: a Unix-socket round trip between two processes here takes %.1f us;"
	       "\n  gets and small puts above take none (the index lives in shared memory).\n\n",
	       rtt);
	store_stop(&d);
	if (rc == 0)
		printf("\n  next: ferry-cluster-demo moves objects between nodes (a GCS and three\n"
		       "  nodes on this machine); `ferry start --head` starts a cluster of your "
		       "own.\n");
out:
	free(src);
	store_stop(&d);
	if (rc)
		show_log(&d);
	cleanup_dir(&d);
	return rc;
}
