/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The job's code into the GCS by content hash when a job starts (the layout: node/rt_code.h),
 * so that a node whose host lacks the library fetches it. Runs on ferry_init's thread with the
 * blocking GCS calls; a hash the GCS holds already (the same library, another job) is not sent
 * again.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/sha256.h"
#include "node/rt_code.h"
#include "runtime/rt.h"

#define COMP "runtime"
#define NS FERRY__CODE_NS, (sizeof(FERRY__CODE_NS) - 1)

static int read_full(int fd, uint8_t *buf, size_t n, uint64_t off)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = pread(fd, buf + got, n - got, (off_t)(off + got));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO; /* shorter than stat said: it changed */
		got += (size_t)r;
	}
	return 0;
}

/* Every chunk of the @size bytes at @fd; their hash into @got. */
static int put_chunks(struct ferry_gcs_client *gcs, const char *hex, int fd, uint64_t size,
		      uint8_t got[FERRY_SHA256_SIZE])
{
	uint8_t *buf = ferry__malloc(FERRY__CODE_CHUNK_BYTES);
	char key[FERRY__CODE_KEY_MAX];
	struct ferry__sha256 s;
	uint64_t off = 0;
	int ret = 0;

	if (!buf)
		return -ENOMEM;
	ferry__sha256_init(&s);
	for (uint32_t i = 0; off < size && ret >= 0; i++) {
		size_t n = size - off < FERRY__CODE_CHUNK_BYTES ? (size_t)(size - off)
								: FERRY__CODE_CHUNK_BYTES;
		int klen = snprintf(key, sizeof(key), "%s.%" PRIu32, hex, i);

		ret = read_full(fd, buf, n, off);
		if (ret < 0)
			break;
		ferry__sha256_update(&s, buf, n);
		ret = ferry_gcs_kv_put(gcs, NS, key, (size_t)klen, buf, n, true);
		off += n;
	}
	ferry__free(buf);
	ferry__sha256_final(&s, got);
	return ret < 0 ? ret : 0;
}

int ferry__rt_code_upload(struct ferry_gcs_client *gcs, const char *path,
			  const uint8_t hash[FERRY_SHA256_SIZE])
{
	char hex[2 * FERRY_SHA256_SIZE + 1], size_text[24];
	uint8_t got[FERRY_SHA256_SIZE];
	struct stat st = {0};
	int fd, ret;

	ferry_id_to_hex(hash, FERRY_SHA256_SIZE, hex, sizeof(hex));
	ret = ferry_gcs_kv_exists(gcs, NS, hex, strlen(hex));
	if (ret == 1)
		return 0;
	if (ret < 0)
		goto err_log;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		goto err_log;
	}
	ret = fstat(fd, &st) < 0 ? -errno : 0;
	if (ret == 0 && (uint64_t)st.st_size > FERRY__CODE_MAX_BYTES) {
		FLOG_ERROR(
			COMP,
			"the job's code %s is %lld bytes: the GCS stores at most %llu MiB of one "
			"job's code",
			path, (long long)st.st_size, FERRY__CODE_MAX_BYTES >> 20);
		close(fd);
		return -EFBIG;
	}
	if (ret == 0)
		ret = put_chunks(gcs, hex, fd, (uint64_t)st.st_size, got);
	close(fd);
	if (ret == 0 && memcmp(got, hash, sizeof(got))) {
		FLOG_ERROR(COMP, "the job's code %s changed while ferry_init stored it", path);
		return -EBADMSG;
	}
	/* The marker last: a reader trusts chunks only once it is there. */
	snprintf(size_text, sizeof(size_text), "%llu", (unsigned long long)st.st_size);
	if (ret == 0)
		ret = ferry_gcs_kv_put(gcs, NS, hex, strlen(hex), size_text, strlen(size_text),
				       true);
	if (ret >= 0) {
		FLOG_DEBUG(COMP, "the job's code %s stored in the GCS as sha256 %s", path, hex);
		return 0;
	}
err_log:
	FLOG_ERROR(COMP, "cannot store the job's code %s in the GCS (sha256 %s): %s", path, hex,
		   ferry_strerror(ret));
	return ret;
}
