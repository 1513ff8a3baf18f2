"""The adapter's tests on run.sh's two workers, in two units of about a minute each: the test that starts its own runs
(a suite in a fresh process and in the test's) on one worker, every other test on the other. The tests sharing the
module's `attacked` fixture then make it once: under pytest-xdist's default each test went to either worker and both
made the attacks. (xdist's own grouping, `--dist loadgroup`, does nothing under pytest 9.2: it renames node ids, which
pytest no longer reads.) A test renamed and not here lands in the larger unit: slower, the same results."""
ALONE = "test_a_suite_runs_recipes_alone_and_in_the_grid_skips_one_lacking_a_resource_and_reports_the_same_at_any_" \
        "thread_count"


def pytest_xdist_make_scheduler(config, log):  # (called only where pytest-xdist is)
    from xdist.scheduler import LoadScopeScheduling

    class TwoUnits(LoadScopeScheduling):
        """Scopes (xdist's units of work that one worker runs whole): ALONE, and the rest of its module."""

        def _split_scope(self, nodeid: str) -> str:
            module, _, name = nodeid.partition("::")
            if not module.endswith("test_textattack_recipes.py") or name == ALONE:
                return nodeid
            return module

    if config.getvalue("dist") == "load":  # the default of -n; a --dist asked for is kept
        return TwoUnits(config, log)
    return None
