/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The body of the layering link checks (top meson.build): an empty program that one
 * subsystem's static library is linked whole into, against only the libraries below it. Any
 * symbol that subsystem takes from a layer it may not use is then an undefined reference.
 */
int main(void)
{
	return 0;
}
