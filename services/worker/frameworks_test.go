package worker

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"sylk.dev/sylk/pkg/testenv"
)

func TestParseTestSummary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		framework, out          string
		passed, failed, skipped int32
	}{
		{"cargo-test", "running 3 tests\ntest a ... ok\ntest b::c ... FAILED\ntest d ... ignored\n\ntest result: FAILED. 1 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out\n" +
			"running 2 tests\ntest result: ok. 2 passed; 0 failed; 0 ignored; 0 measured\n", 3, 1, 1},
		{"jest", "PASS a.test.js\nTests:       1 failed, 1 skipped, 4 passed, 6 total\nTime: 1 s\n", 4, 1, 1},
		{"vitest", " Test Files  1 failed | 1 passed (2)\n      Tests  2 failed | 5 passed | 1 skipped (8)\n", 5, 2, 1},
		{"mocha", "  7 passing (20ms)\n  1 pending\n  2 failing\n", 7, 2, 1},
		{"bun-test", " 3 pass\n 1 fail\n 2 skip\nRan 6 tests\n", 3, 1, 2},
		{"rspec", "Finished in 0.1 seconds\n10 examples, 2 failures, 1 pending\n", 7, 2, 1},
		{"minitest", "5 runs, 9 assertions, 1 failures, 1 errors, 1 skips\n", 2, 2, 1},
		{"maven", "Tests run: 2, Failures: 0, Errors: 0, Skipped: 0\n...\nTests run: 6, Failures: 1, Errors: 1, Skipped: 1\n", 3, 2, 1},
	}
	for _, tt := range tests {
		r := ParseTestSummary(tt.framework, tt.out, time.Second)
		require.Equal(t, tt.framework, r.GetFrameworkId())
		require.Equal(t, []int32{tt.passed, tt.failed, tt.skipped}, []int32{r.GetPassed(), r.GetFailed(), r.GetSkipped()}, tt.framework)
	}
	r := ParseTestSummary("cargo-test", "test b::c ... FAILED\ntest result: FAILED. 0 passed; 1 failed; 0 ignored\n", time.Second)
	require.Equal(t, "b::c", r.GetFailures()[0].GetTestName())
}

// A Rust project's Tester runs cargo test, found by the detection rules,
// and reads its counts.
func TestTesterRunsCargo(t *testing.T) {
	if _, err := exec.LookPath("cargo"); err != nil {
		testenv.MissingTool(t, "cargo")
	}
	dir, run := inspectDir(t, map[string]string{
		"Cargo.toml": "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
		"src/lib.rs": "pub fn add(a: i32, b: i32) -> i32 { a - b }\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn zero() { assert_eq!(super::add(0, 0), 0); }\n" +
			"    #[test]\n    fn add() { assert_eq!(super::add(1, 2), 3); }\n}\n",
	})
	res, detected, err := runTests(context.Background(), dir, run)
	require.NoError(t, err)
	require.True(t, detected)
	require.Equal(t, "cargo-test", res.GetFrameworkId(), res.GetOutput())
	require.Equal(t, int32(1), res.GetPassed(), res.GetOutput())
	require.Equal(t, int32(1), res.GetFailed(), res.GetOutput())
	require.Equal(t, "tests::add", res.GetFailures()[0].GetTestName())
}
