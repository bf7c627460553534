/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Corpus replay: runs every file of the given directories (or the given files) through a
 * fuzz target's LLVMFuzzerTestOneInput, so that the committed corpus, crash regressions
 * included, is an ordinary test. Fails if an input leaks Ferry memory, if the corpus is
 * empty, or if some message type has no valid frame in it (the corpus lost its seeds).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/alloc.h"
#include "fuzz_replay.h"

int fuzz_write_seed(const char *dir, const char *name, const void *prefix, size_t prefix_len,
		    const void *bytes, size_t len)
{
	char path[4096];
	FILE *f;
	int bad;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f) {
		perror(path);
		return 1;
	}
	bad = fwrite(prefix, 1, prefix_len, f) != prefix_len;
	bad |= fwrite(bytes, 1, len, f) != len;
	bad |= fclose(f) != 0;
	if (bad)
		fprintf(stderr, "%s: cannot write\n", path);
	return bad;
}

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	long before = ferry__alloc_live(), size;
	uint8_t *data;

	if (!f) {
		perror(path);
		return -1;
	}
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	fseek(f, 0, SEEK_SET);
	data = malloc(size > 0 ? (size_t)size : 1);
	if (!data || fread(data, 1, (size_t)size, f) != (size_t)size) {
		fprintf(stderr, "%s: cannot read\n", path);
		fclose(f);
		free(data);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(data, (size_t)size);
	free(data);
	if (ferry__alloc_live() != before) {
		fprintf(stderr, "%s: leaked %ld allocations\n", path, ferry__alloc_live() - before);
		return -1;
	}
	return 0;
}

static int run_path(const char *path, int *files)
{
	struct dirent **names;
	struct stat st;
	int n, bad = 0;

	if (stat(path, &st) != 0) {
		perror(path);
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		(*files)++;
		return run_file(path);
	}
	n = scandir(path, &names, NULL, alphasort);
	if (n < 0) {
		perror(path);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		char full[4096];

		if (names[i]->d_name[0] != '.') {
			snprintf(full, sizeof(full), "%s/%s", path, names[i]->d_name);
			bad |= run_path(full, files);
		}
		free(names[i]);
	}
	free(names);
	return bad;
}

__attribute__((weak)) int fuzz_replay_check(void)
{
	return 0;
}

__attribute__((weak)) int fuzz_make_corpus(const char *dir)
{
	fprintf(stderr, "this target has no seed writer (%s untouched)\n", dir);
	return 1;
}

int main(int argc, char **argv)
{
	int files = 0, bad = 0;

	if (argc == 3 && !strcmp(argv[1], "--make-corpus"))
		return fuzz_make_corpus(argv[2]) ? 1 : 0;
	for (int i = 1; i < argc; i++)
		bad |= run_path(argv[i], &files);
	printf("replayed %d inputs\n", files);
	if (!files) {
		fprintf(stderr, "no inputs\n");
		return 1;
	}
	bad |= fuzz_replay_check();
	return bad ? 1 : 0;
}
