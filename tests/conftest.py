"""Test-suite setup. Without a GPU, Triton kernels run in the Triton interpreter on CPU tensors;
the variable must be set before triton is first imported, which is why it lives here."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Each xdist worker gets one intra-op thread: with -n auto the workers already fill the cores, and
# small tensor ops slow down by orders of magnitude when several processes' thread pools contend.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

# The longest tests (5-15 s each on 2 cores) start first: under --dist worksteal the other worker
# takes the short ones, and no long test is left to run alone at the end of the session.
LONGEST_FIRST = ("test_single_path_tree_equals_the_kernels_own_chain", "triton-differential_injected[tree_path_equals",
                 "triton-differential_seeded[block]", "triton-input_integrity", "triton-differential_injected[block]",
                 "test_pass1_gathers_the_records", "test_many_request_launch_reads", "test_two_shards_merged",
                 "test_shipped_suite_stops_calling", "test_shipped_suite_under_exitfirst",
                 "test_shipped_suite_under_xdist", "test_xdist_workers_are_pinned",
                 "test_interrupted_run_writes", "triton-batch_invariance", "test_failure_no_single_call_shows",
                 "triton-large_vocab_structure", "triton-differential_seeded[replicated]",
                 "triton-differential_injected[replicated]", "test_lazy_cut_emits_what_cutting_every_row",
                 "reference-token_distribution[large_vocab_tiles]", "test_declared_deviation_keeps_the_run_green",
                 "test_reference_tree_samples_follow_the_exact_law",
                 # the one launch's and the filter probes' slowest on the interpreter (4.5-10.5 s, 2026-11-29)
                 "test_top_p_bracket_from_the_samples_cells", "test_search_from_the_splits_tallies_finds_the_cut",
                 "test_latency_rows_compare_every_variants", "test_every_split_of_a_filtered_row_stamps",
                 "test_miss_rows_count_the_rows", "test_count_bracket_from_the_whole_sample_leaves",
                 "test_shipped_suite_is_not_green_for_a_backend", "test_filter_misses_refuses_by_name",
                 # the longest on CUDA, where their kernels compile for minutes: started last under a device call's
                 # limit, they were cut off unfinished (docs/nightly/2026-11-29-h200-filters31)
                 "test_slow_path_in_wide_tiles_writes", "test_slow_path_sets_top_p_alone",
                 "test_count_brackets_end_where", "test_one_round_bracket_leaves")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not any(name in item.nodeid for name in LONGEST_FIRST))
