/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SHA-256 (common/sha256.h), the job code's content hash: the FIPS 180-4 / NIST example
 * vectors, every split of a message across updates, and hashing a file through its fd.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/sha256.h"
#include "ftest.h"

static void hex(const uint8_t d[FERRY_SHA256_SIZE], char out[2 * FERRY_SHA256_SIZE + 1])
{
	for (int i = 0; i < FERRY_SHA256_SIZE; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void check(const void *msg, size_t len, const char *want)
{
	uint8_t d[FERRY_SHA256_SIZE];
	char h[2 * FERRY_SHA256_SIZE + 1];

	ferry__sha256(msg, len, d);
	hex(d, h);
	ftest_assert_str_eq(h, want);
}

FTEST(nist_vectors)
{
	static const char q[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	char *million = malloc(1000000);

	check("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	check("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	check(q, sizeof(q) - 1, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	ftest_assert_ptr_notnull(million);
	memset(million, 'a', 1000000);
	check(million, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	free(million);
}

/* Any split of the input over updates gives the one-shot hash (block boundaries, padding
 * that spills into a second block at 56..63 bytes). */
FTEST(updates_in_pieces)
{
	uint8_t msg[200], one[FERRY_SHA256_SIZE], two[FERRY_SHA256_SIZE];

	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(i * 7 + 3);
	for (size_t len = 0; len <= sizeof(msg); len += 1) {
		ferry__sha256(msg, len, one);
		for (size_t cut = 0; cut <= len; cut += 13) {
			struct ferry__sha256 s;

			ferry__sha256_init(&s);
			ferry__sha256_update(&s, msg, cut);
			ferry__sha256_update(&s, msg + cut, len - cut);
			ferry__sha256_final(&s, two);
			ftest_assert_mem_eq(one, two, sizeof(one));
		}
	}
}

FTEST(file_through_its_fd)
{
	char path[512];
	uint8_t d[FERRY_SHA256_SIZE];
	char h[2 * FERRY_SHA256_SIZE + 1];
	int fd;

	snprintf(path, sizeof(path), "%s/f", ftest_tmpdir());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	ftest_assert_int_ge(fd, 0);
	ftest_assert_int_eq(write(fd, "abc", 3), 3);
	ftest_assert_int_eq(lseek(fd, 0, SEEK_SET), 0);
	ftest_assert_ok(ferry__sha256_fd(fd, d));
	hex(d, h);
	ftest_assert_str_eq(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	close(fd);
	ftest_assert_int_eq(ferry__sha256_fd(-1, d), -EBADF);
}
