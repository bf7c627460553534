/* SPDX-License-Identifier: Apache-2.0 */
/* Reading the cluster token file (common/token.h). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/token.h"

#define COMP "token"

int ferry__token_read(const char *path, void *buf, size_t size)
{
	char tmp[FERRY_TOKEN_MAX + 2]; /* the token, its newline, one byte that says "too long" */
	ssize_t n, got = 0;
	int fd, err;

	if (size < FERRY_TOKEN_MAX)
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err = errno;
		FLOG_ERROR(COMP, "cannot open token file %s: %s", path, ferry_strerror(err));
		return -err;
	}
	while ((size_t)got < sizeof(tmp) && (n = read(fd, tmp + got, sizeof(tmp) - got)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = errno;
			close(fd);
			FLOG_ERROR(COMP, "cannot read token file %s: %s", path,
				   ferry_strerror(err));
			return -err;
		}
		got += n;
	}
	close(fd);
	if (got > 0 && tmp[got - 1] == '\n')
		got--;
	if (got <= 0) {
		FLOG_ERROR(COMP, "token file %s is empty", path);
		return -EINVAL;
	}
	if (got > FERRY_TOKEN_MAX) {
		FLOG_ERROR(COMP, "token file %s holds more than %d bytes, the longest token", path,
			   FERRY_TOKEN_MAX);
		return -E2BIG;
	}
	memcpy(buf, tmp, (size_t)got);
	return (int)got;
}
