"""The hand-built pieces under the NNI names: Anneal's window, GP's encoding and acquisition,
Curvefitting's forecast and rule, and which pruner each assessor/advisor becomes."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.study import StudyDirection
from optuna.trial import TrialState, create_trial

from trialflow.config import load_config
from trialflow.tuning.anneal import AnnealSampler, anneal_window, observed_loss, shrink_factor
from trialflow.tuning.assessors import make_pruner, stop_reason
from trialflow.tuning.curvefitting import CurveFittingPruner, predict_final, worse_than_best
from trialflow.tuning.gp import acquisition, from_unit, to_unit

# -- Anneal ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, low, high, shrink, expected",
    [
        (5.0, 0.0, 10.0, 1.0, (0.0, 10.0)),  # no shrinking: the whole range
        (5.0, 0.0, 10.0, 0.5, (2.5, 7.5)),  # centred on the good value
        (0.5, 0.0, 10.0, 0.5, (0.0, 5.0)),  # pushed inside at the low end
        (9.9, 0.0, 10.0, 0.2, (8.0, 10.0)),  # and at the high end
    ],
)
def test_anneal_window(value, low, high, shrink, expected):
    assert anneal_window(value, low, high, shrink) == pytest.approx(expected)


def test_shrink_factor_follows_hyperopt():
    assert shrink_factor(0, 0.1) == 1.0
    assert shrink_factor(10, 0.1) == 0.5
    assert shrink_factor(90, 0.1) == pytest.approx(0.1)


def test_observed_loss_reads_completed_and_early_stopped_trials():
    dist = {"x": FloatDistribution(0, 1)}
    done = create_trial(params={"x": 0.1}, distributions=dist, value=0.8)
    pruned = create_trial(
        params={"x": 0.1}, distributions=dist, state=TrialState.PRUNED, intermediate_values={0: 0.2, 3: 0.4}
    )
    failed = create_trial(params={"x": 0.1}, distributions=dist, state=TrialState.FAIL)
    assert observed_loss(done, StudyDirection.MAXIMIZE) == -0.8
    assert observed_loss(done, StudyDirection.MINIMIZE) == 0.8
    assert observed_loss(pruned, StudyDirection.MINIMIZE) == 0.4  # the last intermediate result
    assert observed_loss(failed, StudyDirection.MINIMIZE) is None


def test_anneal_concentrates_around_the_best_trial():
    study = optuna.create_study(direction="minimize")
    dists = {
        "x": FloatDistribution(0, 100),
        "k": CategoricalDistribution(["a", "b", "c", "d"]),
        "n": IntDistribution(0, 50),
    }
    rng = np.random.RandomState(0)
    for _ in range(40):
        x, k, n = float(rng.uniform(0, 100)), ["a", "b", "c", "d"][rng.randint(4)], int(rng.randint(51))
        study.add_trial(
            create_trial(
                params={"x": x, "k": k, "n": n}, distributions=dists, value=abs(x - 70) + (k != "c") * 10 + abs(n - 20)
            )
        )
    best = study.best_params
    draws = []
    for seed in range(60):
        study.sampler = AnnealSampler(seed=seed)
        trial = study.ask(dists)
        draws.append(trial.params)
        study.tell(trial, state=TrialState.FAIL)
    xs = [d["x"] for d in draws]
    # 40 observations: the window is 1/(1+4) of the range; most draws sit near a top-ranked trial.
    assert np.median([abs(x - best["x"]) for x in xs]) < 25
    assert sum(d["k"] == best["k"] for d in draws) > 30
    assert all(0 <= x <= 100 for x in xs)


# -- GP --------------------------------------------------------------------------------------

DISTRIBUTIONS = [
    (FloatDistribution(-2.0, 6.0), [-2.0, 0.0, 1.5, 6.0]),
    (FloatDistribution(1e-4, 1.0, log=True), [1e-4, 1e-2, 1.0]),
    (IntDistribution(0, 9), [0, 3, 9]),
    (IntDistribution(1, 1024, log=True), [1, 32, 1024]),
    (CategoricalDistribution(["relu", "tanh", None, 3]), ["relu", "tanh", None, 3]),
]


@pytest.mark.parametrize("dist, values", DISTRIBUTIONS)
def test_unit_encoding_round_trips(dist, values):
    for value in values:
        x = to_unit(value, dist)
        assert 0.0 <= x <= 1.0
        back = from_unit(x, dist)
        assert back == pytest.approx(value) if isinstance(value, float) else back == value


@pytest.mark.parametrize("dist, values", DISTRIBUTIONS)
def test_unit_decoding_clips_and_rounds(dist, values):
    assert from_unit(-0.5, dist) == from_unit(0.0, dist)
    assert from_unit(1.5, dist) == from_unit(1.0, dist)
    if isinstance(dist, IntDistribution):
        assert isinstance(from_unit(0.37, dist), int)


def test_acquisition_functions_prefer_what_they_should():
    mean, std = np.array([1.0, 1.0, 0.5]), np.array([0.1, 1.0, 0.1])
    assert np.argmax(acquisition("ucb", mean, std, 1.0, kappa=5, xi=0)) == 1  # exploration
    assert np.argmax(acquisition("ei", mean, std, 1.0, kappa=5, xi=0)) == 1  # same mean, more upside
    poi = acquisition("poi", np.array([2.0, 0.0]), np.array([0.1, 0.1]), 1.0, kappa=0, xi=0)
    assert poi[0] > 0.99 and poi[1] < 0.01
    assert acquisition("ucb", mean, std, 1.0, kappa=0, xi=0).tolist() == mean.tolist()


# -- Curvefitting ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "curve",
    [
        lambda x: 0.9 - 0.5 * x**-0.8,  # pow3
        lambda x: 0.1 * np.log(x) + 0.3,  # log-linear
        lambda x: 0.8 - np.exp(-0.3 * x),  # exp3
    ],
)
def test_forecasts_of_clean_curves_land_near_the_truth(curve):
    x = np.arange(1, 9, dtype=float)
    predicted = predict_final(list(curve(x)), 20)
    truth = float(curve(np.array([20.0]))[0])
    assert predicted is not None
    assert abs(predicted - truth) < 0.1 * max(abs(truth), 0.1)


def test_no_forecast_from_garbage():
    assert predict_final([float("nan")] * 6, 20) is None


@pytest.mark.parametrize(
    "predicted, best, direction, stop",
    [
        (0.80, 0.90, StudyDirection.MAXIMIZE, True),  # 0.80 < 0.95 * 0.90
        (0.86, 0.90, StudyDirection.MAXIMIZE, False),
        (0.30, 0.20, StudyDirection.MINIMIZE, True),  # best 0.20 < 0.95 * 0.30
        (0.205, 0.20, StudyDirection.MINIMIZE, False),
    ],
)
def test_curvefitting_rule(predicted, best, direction, stop):
    assert worse_than_best(predicted, best, 0.95, direction) is stop


def _study_with_best(direction: str, best: float) -> optuna.Study:
    study = optuna.create_study(direction=direction)
    study.add_trial(create_trial(params={}, distributions={}, value=best))
    return study


def _running(values: list[float]) -> optuna.trial.FrozenTrial:
    return create_trial(state=TrialState.RUNNING, intermediate_values=dict(enumerate(values)))


def test_curvefitting_pruner_judges_only_at_its_steps():
    study = _study_with_best("maximize", 0.9)
    pruner = CurveFittingPruner(epoch_num=20, start_step=6, threshold=0.95, gap=2)
    flat_low = [0.3] * 5
    assert bool(pruner.prune(study, _running(flat_low))) is False  # 5 < start_step
    assert bool(pruner.prune(study, _running([0.3] * 6))) is True  # at start_step
    assert bool(pruner.prune(study, _running([0.3] * 7))) is False  # between gaps
    assert bool(pruner.prune(study, _running([0.3] * 8))) is True
    assert bool(pruner.prune(study, _running([0.3] * 20))) is False  # at epoch_num: let it finish
    rising = [0.5 + 0.025 * i for i in range(6)]  # heads for ~1.0
    assert bool(pruner.prune(study, _running(rising))) is False
    assert pruner.prune(optuna.create_study(direction="maximize"), _running([0.3] * 6)) is False  # no best yet


# -- which pruner ----------------------------------------------------------------------------


def _config(tmp_path, extra: str):
    path = tmp_path / "c.yml"
    path.write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: 'true'\n"
        "trialConcurrency: 1\ntrainingService: {platform: local}\n" + extra
    )
    return load_config(path)


def test_medianstop_is_a_median_pruner_judging_from_start_step(tmp_path):
    config = _config(tmp_path, "tuner: {name: TPE}\nassessor: {name: Medianstop, classArgs: {start_step: 5}}\n")
    pruner = make_pruner(config)
    assert isinstance(pruner, optuna.pruners.MedianPruner)
    study = optuna.create_study(direction="maximize")
    for _ in range(3):
        study.add_trial(create_trial(value=1.0, intermediate_values={s: 0.5 + s / 20 for s in range(10)}))
    low = [0.1] * 10
    assert bool(pruner.prune(study, _running(low[:4]))) is False  # 4 results < start_step
    assert bool(pruner.prune(study, _running(low[:5]))) is True  # judged at the 5th result, as NNI
    assert bool(pruner.prune(study, _running([0.9] * 5))) is False


def test_advisors_become_hyperband_pruners(tmp_path):
    config = _config(tmp_path, "advisor: {name: Hyperband, classArgs: {R: 27, eta: 3}}\n")
    pruner = make_pruner(config)
    assert isinstance(pruner, optuna.pruners.HyperbandPruner)
    assert pruner._max_resource == 27 and pruner._reduction_factor == 3
    bohb = make_pruner(_config(tmp_path, "advisor: {name: BOHB, classArgs: {min_budget: 2, max_budget: 18}}\n"))
    assert bohb._min_resource == 2 and bohb._max_resource == 18


def test_no_assessor_no_pruner(tmp_path):
    assert make_pruner(_config(tmp_path, "tuner: {name: TPE}\n")) is None


def test_stop_reason_names_the_assessor(tmp_path):
    config = _config(tmp_path, "tuner: {name: TPE}\nassessor: {name: Curvefitting}\n")
    assert stop_reason(config, 7) == "stopped early by Curvefitting at step 7"


def test_gp_never_proposes_a_point_a_trial_already_has():
    """The acquisition's maximum sits on the bound where the best trial ran (UCB with kappa 0 is
    the model's mean, which peaks there): a second trial there would train what is known, so the
    next-best point not taken is proposed, and a running trial's point counts as taken too."""
    from optuna.distributions import FloatDistribution, IntDistribution

    from trialflow.tuning.gp import GPSampler

    dists = [FloatDistribution(0.0, 1.0)]
    x = np.array([[0.0], [0.25], [0.5], [0.75], [1.0]])
    loss = -x[:, 0]  # lower is better: best at x = 1.0, the bound
    sampler = GPSampler(seed=3, utility="ucb", kappa=0.0, selection_num_warm_up=500)
    point = sampler.propose(x, loss, dists)
    assert point is not None and point[0] != 1.0 and point[0] > 0.9, point

    sampler.running = np.array([[point[0]]])
    again = sampler.propose(x, loss, dists)
    assert again is not None and again[0] not in (1.0, point[0])

    tiny = [IntDistribution(0, 1)]  # both points taken: the trial is drawn at random (None)
    assert GPSampler(seed=3).propose(np.array([[0.0], [1.0]]), np.array([0.0, 1.0]), tiny) is None


def test_grid_keys_name_points_by_the_parameters_they_run():
    """Two points that run the same parameters share a key (a choice's or an integer's cell, a
    log scale's round trip through the parameters): what GP and SMAC look proposals up in."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    from trialflow.tuning.model_sampler import grid_keys

    dists = [FloatDistribution(1e-3, 1.0, log=True), CategoricalDistribution(["a", "b", "c"])]
    point = np.array([[0.3137, 0.49]])
    again = np.array([[to_unit(from_unit(v, d), d) for v, d in zip(point[0], dists)]])
    assert grid_keys(point, dists) == grid_keys(again, dists)
    assert grid_keys(np.array([[0.3137, 0.52]]), dists) == grid_keys(point, dists)  # the same choice
    assert grid_keys(np.array([[0.3138, 0.49]]), dists) != grid_keys(point, dists)
    assert grid_keys(np.empty((0, 0)), dists) == []
