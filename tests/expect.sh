# The `expect` of memseal's shell tests, sourced after `work` (a scratch folder) is set:
#   expect NAME EXIT_CODE PATTERN -- command...
# runs the command, checks its exit code and that its output (stdout and stderr) matches the
# extended regular expression PATTERN (empty: anything). A command that exits 77 printing "SKIP..."
# is skipped unless 77 was wanted. Counts into passed, failed and skipped; the output of the last
# check that passed stays in "$work/last".
passed=0; failed=0; skipped=0
expect() {
  local name="$1" want="$2" pattern="$3"; shift 4
  "$@" >"$work/out" 2>&1; local got=$?
  if [ "$got" -eq 77 ] && [ "$want" -ne 77 ] && grep -q "^SKIP" "$work/out"; then
    echo "skip $name: $(head -1 "$work/out")"; skipped=$((skipped+1)); return
  fi
  if [ "$got" -ne "$want" ]; then
    echo "FAIL $name: exit $got, wanted $want"; sed 's/^/    /' "$work/out" | head -30; failed=$((failed+1)); return
  fi
  if [ -n "$pattern" ] && ! grep -qE -- "$pattern" "$work/out"; then
    echo "FAIL $name: output lacks /$pattern/"; sed 's/^/    /' "$work/out" | head -30; failed=$((failed+1)); return
  fi
  echo "ok   $name"; passed=$((passed+1))
  cp "$work/out" "$work/last"
}
