import numpy as np
import pandas as pd

from loadkit.analysis.align import (
    NS,
    counter_increments,
    counter_rate_on_grid,
    make_grid,
    reduce_on_grid,
)
from loadkit.analysis.telemetry import align_host, align_load, align_triton

T0 = 1_700_000_000 * NS


def test_grid_indexes_and_partial_last_window():
    grid = make_grid(T0, T0 + int(4.5 * NS), 1.0)
    assert grid.n == 5
    idx = grid.index(np.array([T0 - 1, T0, T0 + NS - 1, T0 + 4 * NS, T0 + 5 * NS]))
    assert idx.tolist() == [-1, 0, 0, 4, -1]


def test_gauges_reduce_per_window_and_empty_windows_are_nan():
    grid = make_grid(T0, T0 + 3 * NS, 1.0)
    t = np.array([T0, T0 + NS // 2, T0 + 2 * NS])
    v = np.array([1.0, 3.0, 10.0])
    assert np.allclose(reduce_on_grid(grid, t, v, "mean"), [2.0, np.nan, 10.0], equal_nan=True)
    assert reduce_on_grid(grid, t, v, "max")[0] == 3.0


def test_counter_reset_counts_the_new_value_as_the_increase():
    inc, resets = counter_increments(np.array([100.0, 110.0, 5.0, 15.0]))
    assert resets == 1
    assert np.allclose(inc[1:], [10.0, 5.0, 10.0])


def test_counter_rate_spreads_increments_and_survives_a_reset():
    grid = make_grid(T0, T0 + 4 * NS, 1.0)
    t = T0 + np.arange(5) * NS
    values = np.array([0.0, 10.0, 20.0, 4.0, 14.0])  # reset between 2 s and 3 s
    rate, resets = counter_rate_on_grid(grid, t, values)
    assert resets == 1
    assert np.allclose(rate, [10.0, 10.0, 4.0, 10.0])


def test_counter_rate_leaves_a_gap_empty_instead_of_smearing():
    grid = make_grid(T0, T0 + 10 * NS, 1.0)
    t = T0 + np.array([0, 1, 2, 8, 9]) * NS
    values = np.array([0.0, 5.0, 10.0, 1000.0, 1005.0])
    rate, _ = counter_rate_on_grid(grid, t, values)
    assert np.allclose(rate[:2], 5.0)
    assert np.all(np.isnan(rate[2:8]))
    assert rate[8] == 5.0


def test_host_cgroup_throttling_as_percent_of_periods_with_reset():
    grid = make_grid(T0, T0 + 4 * NS, 1.0)
    frame = pd.DataFrame(
        {
            "t_ns": T0 + np.arange(5) * NS,
            "cpu_per_core_pct": [[10.0, 100.0]] * 5,
            "cgroup_nr_periods": [0, 10, 20, 10, 20],  # cgroup recreated after 2 s
            "cgroup_nr_throttled": [0, 0, 5, 2, 7],
        }
    )
    host = align_host(frame, grid)
    assert host is not None and host.counter_resets == 1
    assert np.allclose(host.cgroup_throttled_pct, [0.0, 50.0, 20.0, 50.0])
    assert np.allclose(host.busy_core_frac, 0.5)
    assert np.allclose(host.idle_cores, 1.0)


def test_triton_interval_rows_read_cumulative_at_interval_end_and_batch_matrix():
    grid = make_grid(T0, T0 + 3 * NS, 1.0)
    frame = pd.DataFrame(
        {
            "t_ns": T0 + np.arange(3) * NS,
            "interval_ns": [NS] * 3,
            "model": ["ranker"] * 3,
            "execution_count": [10, 20, 30],
            "inference_count": [20, 40, 80],
            "queue_ns": [20 * 10**6, 40 * 10**6, 80 * 10**6],
            "compute_infer_ns": [0, 0, 0],
            "batch_sizes": [{"2": 10}, {"2": 10}, {"4": 10}],
        }
    )
    tr = align_triton(frame, grid, "ranker")
    assert tr is not None
    assert np.isnan(tr.batch_size_mean[0])  # no earlier reading to difference
    assert tr.batch_size_mean[1] == 2.0 and tr.batch_size_mean[2] == 4.0
    assert np.allclose(tr.queue_ms_per_request[1:], 1.0)
    assert tr.batch_sizes is not None and tr.batch_sizes.sizes == (2, 4)
    assert tr.batch_sizes.counts == ((10, 0), (10, 0), (0, 10))
    assert tr.batch_size_max.tolist() == [2.0, 2.0, 4.0]


def _gpu_rows(gpu, clocks, **extra):
    rows = []
    for i, clock in enumerate(clocks):
        row = {
            "t_ns": T0 + i * NS,
            "gpu": gpu,
            "sm_clock_mhz": clock,
            "sm_clock_max_mhz": 2000,
            "util_gpu_pct": 80.0,
            "temp_c": 70.0 + gpu,
            "power_w": 200.0,
            "power_limit_w": 300.0,
        }
        row.update({k: v[i] for k, v in extra.items()})
        rows.append(row)
    return rows


def test_gpu_idle_clock_is_ignored_and_reason_bools_are_read():
    from loadkit.analysis.telemetry import align_gpu

    grid = make_grid(T0, T0 + 3 * NS, 1.0)
    frame = pd.DataFrame(
        _gpu_rows(
            0,
            [2000, 1000, 300],
            reason_sw_thermal=[False, True, False],
            reason_gpu_idle=[False, False, True],
        )
    )
    gpu = align_gpu(frame, grid)
    assert gpu is not None and gpu.has_reasons
    assert gpu.clock_ratio_busy[0] == 1.0 and gpu.clock_ratio_busy[1] == 0.5
    assert np.isnan(gpu.clock_ratio_busy[2])  # idle clock: not a clock drop
    assert gpu.thermal_reason.tolist()[:2] == [0.0, 1.0]


def test_several_gpus_report_the_slowest_clock_and_hottest_temperature():
    from loadkit.analysis.telemetry import align_gpu

    grid = make_grid(T0, T0 + 2 * NS, 1.0)
    frame = pd.DataFrame(_gpu_rows(0, [2000, 2000]) + _gpu_rows(1, [2000, 1200])).sort_values(
        "t_ns"
    )
    gpu = align_gpu(frame, grid)
    assert gpu is not None
    assert gpu.clock_ratio_busy.tolist() == [1.0, 0.6]
    assert gpu.sm_clock_mhz.tolist() == [2000.0, 1200.0]
    assert gpu.temp_c.tolist() == [71.0, 71.0]
    assert gpu.power_w.tolist() == [400.0, 400.0]


def test_several_gpus_read_the_reasons_of_the_gpu_whose_clock_fell():
    from loadkit.analysis.telemetry import align_gpu
    from loadkit.rundir.schema import REASON_SW_POWER_CAP, REASON_SW_THERMAL

    # GIVEN GPU 0 power-capped with its clock holding, GPU 1 thermally slowed in window 1
    grid = make_grid(T0, T0 + 2 * NS, 1.0)
    capped = _gpu_rows(0, [2000, 2000], clocks_event_reasons=[REASON_SW_POWER_CAP] * 2)
    hot = _gpu_rows(1, [2000, 1200], clocks_event_reasons=[0, REASON_SW_THERMAL])
    gpu = align_gpu(pd.DataFrame(capped + hot).sort_values("t_ns"), grid)
    assert gpu is not None
    # THEN window 1's reasons are GPU 1's: thermal, not the neighbour's power cap
    assert gpu.thermal_reason[1] == 1.0 and gpu.power_reason[1] == 0.0


def test_reason_columns_nvml_could_not_read_are_no_bits_not_zero_bits():
    from loadkit.analysis.telemetry import align_gpu

    # GIVEN a GPU whose NVML answered "not supported" for the reasons: every reason column
    # is there, and null in every row (the sampler records what it could not read as null)
    grid = make_grid(T0, T0 + 2 * NS, 1.0)
    nulls = {"clocks_event_reasons": [None] * 2, "reason_sw_power_cap": [None] * 2}
    gpu = align_gpu(pd.DataFrame(_gpu_rows(0, [2000, 1500], **nulls)), grid)
    assert gpu is not None
    # THEN the analysis knows no bits were read (and judges by power and temperature),
    # instead of reading "no reason at all" for a clock that fell
    assert gpu.has_reasons is False


def test_moving_to_another_cgroup_is_not_a_throttling_burst():
    grid = make_grid(T0, T0 + 4 * NS, 1.0)
    frame = pd.DataFrame(
        {
            "t_ns": T0 + np.arange(5) * NS,
            "cgroup_path": ["/a", "/a", "/b", "/b", "/b"],
            "cgroup_nr_periods": [0, 10, 5000, 5010, 5020],
            "cgroup_nr_throttled": [0, 0, 4000, 4005, 4010],
        }
    )
    host = align_host(frame, grid)
    assert host is not None
    pct = host.cgroup_throttled_pct
    assert pct[0] == 0.0 and np.isnan(pct[1]) and np.allclose(pct[2:], 50.0)


def test_new_connections_from_raw_tcp_open_counters_alone():
    # GIVEN a host series scraped from node-exporter: raw TCP open counters, no per-interval
    # count (the live sampler's `tcp_new_connections`)
    grid = make_grid(T0, T0 + 3 * NS, 1.0)
    frame = pd.DataFrame(
        {
            "t_ns": T0 + np.arange(4) * NS,
            "tcp_active_opens": [100, 110, 130, 130],
            "tcp_passive_opens": [50, 55, 55, 95],
        }
    )
    host = align_host(frame, grid)
    # THEN the connection rate is their increase per second
    assert host is not None and host.has_tcp
    assert host.tcp_new_connections_per_s.tolist() == [15.0, 20.0, 40.0]


def test_cores_used_by_the_machine_by_the_server_and_by_loadkits_generator():
    # GIVEN two host samples per 1 s window on 4 cores, and two Locust processes
    grid = make_grid(0, 2 * NS, 1.0)
    host = pd.DataFrame(
        {
            "t_ns": [0, NS // 2, NS, 3 * NS // 2],
            "cpu_per_core_pct": [[50, 50, 0, 0], [100, 50, 50, 0], [100] * 4, [100] * 4],
            "server_cpu_pct": [None, 40.0, 150.0, 250.0],
        }
    )
    load = pd.DataFrame(
        {
            "t_ns": [0, 0, NS, NS],
            "process": ["local", "worker-0", "local", "worker-0"],
            "offered": [1, 1, 1, 1],
            "generator_cpu_pct": [30.0, 20.0, 60.0, None],
        }
    )
    h = align_host(host, grid)
    load_series = align_load(load, grid)
    assert h is not None and load_series is not None
    # THEN each window holds the cores' worth used: the machine's, the server's tree's
    # (a first sample with no CPU yet is left out) and the generator's, summed over processes
    assert h.cpu_cores_used is not None and h.server_cpu_cores is not None
    assert np.allclose(h.cpu_cores_used, [1.5, 4.0])
    assert np.allclose(h.server_cpu_cores, [0.4, 2.0])
    assert np.allclose(load_series.generator_cpu_cores, [0.5, 0.6])
