// One experiment: what it is, how far it got, charts, the trial table, comparison and export.
import { useEffect, useMemo, useState } from "react";
import { Box, Button, Code, HStack, Heading, Link, SimpleGrid, Tabs, Text, VStack } from "@chakra-ui/react";
import { type ChartData, type Curve, type Summary, type TrialRow, apiUrl, getJson } from "./api";
import { Chart } from "./Chart";
import { DRAWN_CAP, anyPoints, curvesOption, drawnRows, historyOption, importanceOption, parallelOption, paretoOption, timelineOption } from "./charts";
import { ErrorBox, Fact, Loading, Panel, StatusBadge, StatusCounts } from "./common";
import { Compare } from "./Compare";
import { ConfigView, ExperimentActions, History } from "./Actions";
import { useColorMode, useLoad, useUrlState } from "./hooks";
import { TrialTable } from "./TrialTable";
import { airflowUrl, formatDuration, formatParameters, formatTime, formatValue, visible } from "./util";

function NoMetric() {
  return (
    <Text fontSize="sm" color="fg.muted" py={8} textAlign="center" data-testid="no-metric">
      No trial has reported a result yet.
    </Text>
  );
}

function Summary({ summary }: { summary: Summary }) {
  const elapsed = summary.started ? (summary.active || !summary.ended ? Date.now() / 1000 : summary.ended) - summary.started : null;
  const budget = summary.config.maxExperimentDuration;
  const started = Object.values(summary.counts).reduce((a, b) => a + (b ?? 0), 0);
  const tuner = summary.config.tuner;
  const several = (summary.objectives ?? []).length > 1;
  return (
    <Panel testId="summary">
      <HStack gap={8} flexWrap="wrap" alignItems="flex-start">
        <Fact label="Status"><StatusBadge status={summary.state} /></Fact>
        <Fact label="Trials">{started}{summary.config.maxTrialNumber ? ` / ${summary.config.maxTrialNumber}` : ""}</Fact>
        <Fact label="Elapsed">{formatDuration(elapsed)}{budget ? ` / ${formatDuration(budget)}` : ""}</Fact>
        {several ? (
          <Fact label="Pareto set"><Text data-testid="pareto-count">{summary.pareto.length} trial{summary.pareto.length === 1 ? "" : "s"}</Text></Fact>
        ) : (
          <Fact label={`Best (${summary.optimize_mode})`}>
            <Text fontFamily="mono" data-testid="best-metric">{summary.best ? formatValue(summary.best.metric) : "–"}</Text>
          </Fact>
        )}
        <Fact label="Tuner">{tuner?.name ?? tuner?.className ?? "–"}{summary.config.assessor?.name ? ` + ${summary.config.assessor.name}` : ""}</Fact>
        <Fact label="Platform">{summary.config.platforms.join(", ")}</Fact>
        <Fact label="Concurrency"><span data-testid="concurrency">{summary.config.trialConcurrency ?? "–"}</span>{summary.changed?.trialConcurrency ? " (changed)" : ""}</Fact>
        <Fact label="Started">{formatTime(summary.started)}</Fact>
      </HStack>
      {summary.stopped ? (
        <Text mt={2} fontSize="sm" color="orange.fg" data-testid="stopped-by">
          {summary.active ? "Stopping" : "Stopped"} by {visible(summary.stopped.by ?? "?")} at {formatTime(summary.stopped.at)}: {visible(summary.stopped.reason ?? "")}
        </Text>
      ) : null}
      <Box mt={3}><StatusCounts counts={summary.counts} /></Box>
      {several ? <ParetoList summary={summary} /> : summary.best && (
        <Text mt={3} fontSize="sm">
          Best trial <b>{summary.best.trial_id}</b>: <Code fontSize="xs" data-testid="best-parameters">{formatParameters(summary.best.parameters)}</Code>
        </Text>
      )}
      <Lineage summary={summary} />
      {summary.population ? <Population population={summary.population} /> : null}
      {summary.mlflow ? <Tracking mlflow={summary.mlflow} /> : null}
    </Panel>
  );
}

/** Where the experiment is in MLflow: its run (each trial's nested run is linked from its row),
 * and, while its results do not reach MLflow, since when and why (a server that does not answer,
 * a connection missing where Airflow runs): nothing is lost meanwhile. */
function Tracking({ mlflow }: { mlflow: NonNullable<Summary["mlflow"]> }) {
  return (
    <Text mt={3} fontSize="sm" data-testid="mlflow">
      {mlflow.run_url
        ? <Link href={mlflow.run_url} target="_blank" rel="noopener noreferrer" color="blue.fg" textDecoration="underline"
            data-testid="mlflow-run">Open in MLflow</Link>
        : "MLflow"}
      {mlflow.away
        ? <Text as="span" color="orange.fg" data-testid="mlflow-away">
            {" "}· results have not reached MLflow since {formatTime(mlflow.away.since)} ({mlflow.away.error || "no answer"}): they are kept and sent once it is reached
          </Text>
        : <Text as="span" color="fg.muted"> · each trial a nested run</Text>}
    </Text>
  );
}

const GENERATIONS_SHOWN = 12;

/** Population Based Training's progress: each generation's ended trials of its population. */
function Population({ population }: { population: NonNullable<Summary["population"]> }) {
  const current = population.generations.find((g) => g.ended < population.size);
  const done = !current && population.generations.length > 0;
  // A long experiment has hundreds of generations: the newest few are what is watched.
  const shown = population.generations.slice(-GENERATIONS_SHOWN);
  const hidden = population.generations.length - shown.length;
  return (
    <Box mt={3} fontSize="sm" data-testid="population">
      <Text>
        Population Based Training, {population.size} trials a generation
        {population.planned ? `, ${population.planned} generation${population.planned === 1 ? "" : "s"}` : ""}
        {current ? `: generation ${current.generation} has ${current.ended} of ${population.size} ended`
          : done ? `: every generation so far has ended` : ": no trial yet"}.
        {" "}A trial's page shows the one whose checkpoint it started from.
      </Text>
      <HStack gap={1} mt={1} flexWrap="wrap">
        {hidden > 0 ? (
          <Text fontSize="xs" color="fg.muted" data-testid="generations-earlier">
            {hidden.toLocaleString()} earlier generation{hidden === 1 ? "" : "s"} ·
          </Text>
        ) : null}
        {shown.map((g) => (
          <Box key={g.generation} px={2} py={0.5} borderRadius="sm" fontSize="xs" data-testid={`generation-${g.generation}`}
            bg={g.ended >= population.size ? "green.subtle" : g.trials ? "blue.subtle" : "bg.muted"}
            title={`generation ${g.generation}: ${g.trials} started, ${g.ended} ended`}>
            gen {g.generation}: {g.ended}/{population.size}
          </Box>
        ))}
      </HStack>
    </Box>
  );
}

/** Several objectives: no single best; the Pareto set's trials, by the first objective. */
function ParetoList({ summary }: { summary: Summary }) {
  const shown = summary.pareto.slice(0, 5);
  const objectives = summary.objectives.map((o) => `${o.metric} (${o.mode})`).join(" · ");
  return (
    <Box mt={3} fontSize="sm" data-testid="pareto-list">
      <Text>Objectives: {objectives}. No trial of the Pareto set is beaten on every objective by another trial.</Text>
      {shown.map((row) => (
        <Text key={row.trial_index} fontFamily="mono" fontSize="xs">
          {row.trial_id}: {Object.entries(row.values ?? {}).map(([k, v]) => `${k} ${formatValue(v)}`).join(", ")} ← {formatParameters(row.parameters)}
        </Text>
      ))}
      {summary.pareto.length > shown.length ? <Text color="fg.muted" fontSize="xs">and {summary.pareto.length - shown.length} more (Trials tab, ◆)</Text> : null}
    </Box>
  );
}

/** Where an experiment came from and what came of it: imported from NNI, warm-started from
 * another (results learnt or best sets run first), re-tuned on new data; and the later ones. */
function Lineage({ summary }: { summary: Summary }) {
  const [, update] = useUrlState();
  const experimentLink = (id: string) => (
    <Link key={id} color="blue.fg" href={`${window.location.pathname}?experiment=${encodeURIComponent(id)}`}
      onClick={(e) => { e.preventDefault(); update({ experiment: id, tab: null, trial: null, compare: null }); }}>{id}</Link>
  );
  const from = summary.retuned_from;
  const by = summary.retuned_by ?? [];
  const warm = summary.warm_started_from;
  const warmBy = summary.warm_started_by ?? [];
  const imported = summary.imported_from;
  if (!from && by.length === 0 && !warm && warmBy.length === 0 && !imported) return null;
  return (
    <VStack mt={3} gap={1} alignItems="flex-start" fontSize="sm" data-testid="retune-links">
      {imported && (
        <Text data-testid="imported-from">
          Imported from NNI experiment <Code fontSize="xs">{imported.nni_id}</Code>: its trials, results and times as NNI recorded them
          {imported.swapped ? ` (${imported.swapped} result${imported.swapped === 1 ? "" : "s"} paired with the parameters the trial reported them for)` : ""}.
        </Text>
      )}
      {warm && (
        <Text data-testid="warm-started-from">
          Warm-started from {experimentLink(warm.experiment_id)}: {warm.use === "results"
            ? `its tuner learnt from ${warm.learnt} of its result${warm.learnt === 1 ? "" : "s"} (they are not trials of this experiment)`
            : `its ${warm.queued} best parameter set${warm.queued === 1 ? "" : "s"} ran first here`}
          {warm.dropped ? `, ${warm.dropped} outside this search space` : ""}.
        </Text>
      )}
      {warmBy.length > 0 && (
        <Text data-testid="warm-started-by">Warm-started later: {warmBy.map((id, i) => <span key={id}>{i ? ", " : ""}{experimentLink(id)}</span>)}.</Text>
      )}
      {from && (
        <Text>
          Re-tuned {experimentLink(from.experiment_id)} on new data: its {from.queued} best parameter set{from.queued === 1 ? "" : "s"} ran first here
          {from.dropped ? `, ${from.dropped} no longer in the search space` : ""}.
        </Text>
      )}
      {by.length > 0 && (
        <Text>Re-tuned later by {by.map((id, i) => <span key={id}>{i ? ", " : ""}{experimentLink(id)}</span>)}.</Text>
      )}
    </VStack>
  );
}

export function ExperimentPage({ experimentId, tab, selected, onTab, onSelect, onOpenTrial, embedded }: {
  experimentId: string;
  tab: string;
  selected: number[];
  onTab: (tab: string) => void;
  onSelect: (indexes: number[]) => void;
  onOpenTrial: (index: number) => void;
  embedded?: boolean;
}) {
  const id = encodeURIComponent(experimentId);
  const [live, setLive] = useState(false);
  const summary = useLoad(() => getJson<Summary>(`experiments/${id}`), [id], live);
  const current = summary.data;
  useEffect(() => setLive(current?.active ?? false), [current?.active]);
  const chart = useLoad(() => getJson<ChartData>(`experiments/${id}/chart`), [id], live);
  const curves = useLoad(() => getJson<{ curves: Curve[] }>(`experiments/${id}/curves`), [id], live);
  // Importance is the one costly computation: asked for once the other charts have their data.
  const importance = useLoad(() => getJson<{ importances: Record<string, number>; note: string | null; trials: number; of?: number }>(
    `experiments/${id}/importance`), [id], live, 30000, chart.data !== undefined);
  const rows = chart.data?.trials ?? [];
  // A chart of results with none to draw was a bare pair of axes: it says so instead.
  const anyMetric = rows.some((r) => r.metric !== null);
  const mode = current?.optimize_mode ?? "maximize";
  const objectives = current?.objectives ?? [];
  const several = objectives.length > 1;
  const history = useMemo(() => historyOption(rows, mode, objectives), [rows, mode, objectives]);
  const pareto = useMemo(() => (several ? paretoOption(rows, objectives) : null), [rows, objectives, several]);
  const colorMode = useColorMode();
  // Past DRAWN_CAP trials the per-trial charts draw a sample (said under each): a page of 20,000
  // lines took seconds to draw and showed a mass; the history and the counts keep every trial.
  const drawn = useMemo(() => drawnRows(rows, mode), [rows, mode]);
  const total = Math.max(chart.data?.total ?? 0, rows.length);
  const sampled = drawn.length < total
    ? `${drawn.length.toLocaleString()} of ${total.toLocaleString()} trials drawn: every trial that set a new best, the best ${Math.floor(DRAWN_CAP / 4).toLocaleString()}, the running ones${several ? ", the Pareto set" : ""} and an even spread of the others`
    : null;
  const parallel = useMemo(() => parallelOption(drawn, current, colorMode), [drawn, current, colorMode]);
  const timeline = useMemo(() => timelineOption(drawn, chart.data?.concurrency), [drawn, chart.data]);
  const curveOption = useMemo(() => (curves.data ? curvesOption(curves.data.curves) : {}), [curves.data]);
  const importanceChart = useMemo(() => importanceOption(importance.data?.importances ?? {}), [importance.data]);
  if (summary.error && !current) return <ErrorBox error={summary.error} />;
  if (!current) return <Loading />;
  return (
    // Embedded under the DAG run's tab bar, the heading needs room of its own (it sat under the bar).
    <VStack alignItems="stretch" gap={4} p={embedded ? 0 : 2} pt={embedded ? 4 : 2} data-testid="experiment-page">
      <HStack justifyContent="space-between" flexWrap="wrap">
        <Box>
          <Heading size="md" data-testid="experiment-name">{visible(current.name ?? current.experiment_id)}</Heading>
          <Text fontSize="sm" color="fg.muted">
            experiment <Code fontSize="xs">{current.experiment_id}</Code>
            {current.dag_id ? <> · DAG <Link href={airflowUrl(`dags/${encodeURIComponent(current.dag_id)}`)}>{current.dag_id}</Link></> : null}
            {current.task_group ? <> · task group <Code fontSize="xs" data-testid="task-group">{current.task_group}</Code></> : null}
            {current.links.dag_run ? <> · <Link href={current.links.dag_run}>run {current.run_id}</Link></> : null}
            {live ? " · refreshing every 5 s" : ""}
          </Text>
        </Box>
        <HStack>
          <Button asChild size="sm" variant="outline"><a href={apiUrl(`experiments/${id}/export.csv`)} download data-testid="export-csv">Export CSV</a></Button>
          <Button asChild size="sm" variant="outline"><a href={apiUrl(`experiments/${id}/export.json`)} download>Export JSON</a></Button>
        </HStack>
      </HStack>
      <Summary summary={current} />
      <ExperimentActions summary={current} onChanged={summary.reload} />
      <Tabs.Root value={tab} onValueChange={(e: { value: string }) => onTab(e.value)} variant="line" lazyMount>
        <Tabs.List>
          <Tabs.Trigger value="overview" data-testid="tab-overview">Overview</Tabs.Trigger>
          <Tabs.Trigger value="trials" data-testid="tab-trials">Trials ({current.trials})</Tabs.Trigger>
          <Tabs.Trigger value="compare" data-testid="tab-compare">Compare ({selected.length})</Tabs.Trigger>
          <Tabs.Trigger value="config" data-testid="tab-config">Config</Tabs.Trigger>
        </Tabs.List>
        <Tabs.Content value="overview">
          {chart.error && !chart.data ? <ErrorBox error={chart.error} /> : !chart.data ? <Loading /> : (
            <SimpleGrid columns={{ base: 1, xl: 2 }} gap={4}>
              {pareto && (
                <Panel title={`Pareto front: ${objectives.slice(0, 3).map((o) => o.metric).join(" vs ")}`} testId="chart-pareto">
                  <Text fontSize="xs" color="fg.muted" mb={1}>{rows.length < total ? `${rows.length.toLocaleString()} of ${total.toLocaleString()} trials (the whole Pareto set)` : "every trial"} with all its values; ◆ the Pareto set{objectives.length > 2 ? `; colour: ${objectives[2].metric}` : ""}</Text>
                  <Chart option={pareto} testId="pareto-canvas"
                    onClick={(p) => Array.isArray(p.data) && onOpenTrial(Number((p.data as number[])[3]))} />
                </Panel>
              )}
              <Panel title="Optimisation history" testId="chart-history">
                {sampled ? <Text fontSize="xs" color="fg.muted" mb={1} data-testid="history-sampled">{sampled}{chart.data?.whole_best_line && !several ? "; the best-so-far line is every trial's" : ""}</Text> : null}
                {!anyMetric ? <NoMetric /> : (
                  <Chart option={history} testId="history-canvas"
                    onClick={(p) => Array.isArray(p.data) && onOpenTrial(Number((p.data as number[])[0]))} />
                )}
              </Panel>
              <Panel title="Parameters and metric" testId="chart-parallel">
                {sampled ? <Text fontSize="xs" color="fg.muted" mb={1} data-testid="parallel-sampled">{sampled}</Text> : null}
                {!anyMetric ? <NoMetric /> : <Chart option={parallel} />}
              </Panel>
              <Panel title="Intermediate results" testId="chart-curves">
                <Text fontSize="xs" color="fg.muted" mb={1}>best finished, running and early-stopped trials (dashed, ✕ where stopped)</Text>
                {curves.data && !anyPoints(curves.data.curves) ? (
                  <Text fontSize="sm" color="fg.muted" py={8} textAlign="center" data-testid="no-curves">
                    No trial has reported an intermediate result.
                  </Text>
                ) : <Chart option={curveOption} />}
              </Panel>
              <Panel title="Timeline and concurrency" testId="chart-timeline">
                <Text fontSize="xs" color="fg.muted" mb={1}>
                  {sampled ? `${sampled}; the running count counts every trial` : "one bar per trial, from its start to its end, coloured by status as in the counts above"}
                </Text>
                <Chart option={timeline} />
              </Panel>
              <Panel title="Parameter importance" testId="chart-importance">
                {importance.data?.note ? <Text color="fg.muted" fontSize="sm">{importance.data.note}</Text> : null}
                <Chart option={importanceChart} height={220} />
                <Text fontSize="xs" color="fg.muted" data-testid="importance-over">Optuna PED-ANOVA over {(importance.data?.of ?? 0) > (importance.data?.trials ?? 0)
                  ? `an even spread of ${(importance.data?.trials ?? 0).toLocaleString()} of the ${(importance.data?.of ?? 0).toLocaleString()}`
                  : `the ${importance.data?.trials ?? 0}`} trials with a final result (succeeded, or early-stopped after reporting one: the trials the best and the charts count)</Text>
              </Panel>
            </SimpleGrid>
          )}
        </Tabs.Content>
        <Tabs.Content value="trials">
          <TrialTable experimentId={experimentId} summary={current} live={live} selected={selected}
            onSelect={onSelect} onOpen={onOpenTrial} />
          {selected.length >= 2 && (
            <Button mt={2} size="sm" onClick={() => onTab("compare")} data-testid="compare-button">
              Compare {selected.length} trials
            </Button>
          )}
        </Tabs.Content>
        <Tabs.Content value="compare">
          <Compare experimentId={experimentId} selected={selected} summary={current} onOpenTrial={onOpenTrial} />
        </Tabs.Content>
        <Tabs.Content value="config">
          <ConfigView experimentId={experimentId} />
        </Tabs.Content>
      </Tabs.Root>
      <History experimentId={experimentId} live={live} />
    </VStack>
  );
}
