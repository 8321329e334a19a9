/* SPDX-License-Identifier: MIT */
/* text_clean: what a plugin's message becomes before a terminal, a log or JSON sees it. */
#include <string.h>
#include <criterion/criterion.h>
#include "util/textio.h"

static void expect(const char *in, const char *out)
{
	char buf[64];
	strcpy(buf, in);
	text_clean(buf);
	cr_assert_str_eq(buf, out, "text_clean(\"%s\")", in);
}

Test(text, control_bytes_become_question_marks)
{
	expect("a\nb\tc\x1b[2Jd\x7f", "a?b?c?[2Jd?");
}

Test(text, well_formed_utf8_is_kept)
{
	expect("caf\xc3\xa9 \xe2\x90\xa4 \xf0\x9f\x99\x82",
	       "caf\xc3\xa9 \xe2\x90\xa4 \xf0\x9f\x99\x82");
}

Test(text, a_character_cut_at_the_end_goes)
{
	/* U+2424 cut after one and after two of its three bytes, U+1F642 after three. */
	expect("line\xe2", "line");
	expect("line\xe2\x90", "line");
	expect("x\xf0\x9f\x99", "x");
}

Test(text, bytes_that_are_no_utf8_become_question_marks)
{
	expect("a\xff"
	       "b",
	       "a?b"); /* never a UTF-8 byte */
	expect("a\x80"
	       "b",
	       "a?b"); /* a continuation with no lead */
	expect("a\xc0\xaf"
	       "b",
	       "a??b"); /* an overlong '/' */
	expect("a\xed\xa0\x80"
	       "b",
	       "a???b"); /* a surrogate */
	expect("a\xe2\x90"
	       "b",
	       "a??b");                     /* cut short in the middle, not at the end */
	expect("\xf5\x80\x80\x80", "????"); /* past U+10FFFF */
}
