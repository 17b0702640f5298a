// Steering a running experiment from its page, as NNI's WebUI did: stop it, change its limits,
// add a trial with chosen parameters, re-run failed trials; and what was done (the history) and
// the whole effective config. Shown only to people who may edit the experiment's DAG (the
// server checks again: 403 for the others); destructive actions ask first.
import { useEffect, useState } from "react";
import { Box, Button, Code, HStack, Input, Table, Text, Textarea, VStack } from "@chakra-ui/react";
import { type HistoryEntry, type Summary, getJson, send } from "./api";
import { ErrorBox, Loading, Panel } from "./common";
import { useLoad } from "./hooks";
import { formatTime, visible } from "./util";

type Outcome = { ok: boolean; text: string } | null;

function Feedback({ outcome }: { outcome: Outcome }) {
  if (!outcome) return null;
  return (
    <Text fontSize="sm" mt={2} color={outcome.ok ? "green.fg" : "red.fg"} data-testid="action-outcome">
      {visible(outcome.text)}
    </Text>
  );
}

async function attempt(run: () => Promise<string>, done: (o: Outcome) => void, changed: () => void) {
  try {
    done({ ok: true, text: await run() });
    changed();
  } catch (error) {
    done({ ok: false, text: (error as Error).message });
  }
}

export function ExperimentActions({ summary, onChanged }: { summary: Summary; onChanged: () => void }) {
  const id = encodeURIComponent(summary.experiment_id);
  const [outcome, setOutcome] = useState<Outcome>(null);
  const [busy, setBusy] = useState(false);
  const [concurrency, setConcurrency] = useState(String(summary.config.trialConcurrency ?? ""));
  const [maxTrials, setMaxTrials] = useState(String(summary.config.maxTrialNumber ?? ""));
  const [duration, setDuration] = useState(summary.config.maxExperimentDuration ? String(summary.config.maxExperimentDuration) : "");
  const [parameters, setParameters] = useState(JSON.stringify(summary.best?.parameters ?? {}, null, 1));
  // The fields follow the limits as they change (an added trial raises maxTrialNumber): applying
  // a stale value would undo someone's change.
  useEffect(() => setConcurrency(String(summary.config.trialConcurrency ?? "")), [summary.config.trialConcurrency]);
  useEffect(() => setMaxTrials(String(summary.config.maxTrialNumber ?? "")), [summary.config.maxTrialNumber]);
  useEffect(() => setDuration(summary.config.maxExperimentDuration ? String(summary.config.maxExperimentDuration) : ""),
    [summary.config.maxExperimentDuration]);
  if (!summary.may_edit) return null;
  if (!summary.active) {
    // An action that ended the experiment (a stop, the last trial killed) still says what it did:
    // the page refreshes at once, and the outcome vanished with the controls it came from.
    return outcome ? <Panel title="Steer this experiment" testId="actions-done"><Feedback outcome={outcome} /></Panel> : null;
  }
  const act = (run: () => Promise<string>) => {
    setBusy(true);
    void attempt(run, setOutcome, onChanged).finally(() => setBusy(false));
  };
  const stop = () => {
    if (!window.confirm("Stop this experiment? No new trial starts and running trials are cancelled.")) return;
    act(async () => {
      const r = await send<{ trials: number[] }>(`experiments/${id}/stop`, "POST");
      return `Stopped: ${r.trials.length} running trial(s) asked to stop.`;
    });
  };
  const rerunFailed = () => {
    if (!window.confirm("Re-run every failed, killed or early-stopped trial with its parameters, each as a new trial?")) return;
    act(async () => {
      const r = await send<{ rerun: number[] }>(`experiments/${id}/rerun-failed`, "POST");
      return `Queued again: trial${r.rerun.length > 1 ? "s" : ""} ${r.rerun.join(", ")}.`;
    });
  };
  const limits = () => {
    const changes: Record<string, string | number> = {};
    const number = (text: string) => (/^\d+$/.test(text.trim()) ? Number(text) : text);
    if (concurrency !== String(summary.config.trialConcurrency ?? "")) changes.trialConcurrency = number(concurrency);
    if (maxTrials !== String(summary.config.maxTrialNumber ?? "")) changes.maxTrialNumber = number(maxTrials);
    if (duration !== (summary.config.maxExperimentDuration ? String(summary.config.maxExperimentDuration) : "")) {
      changes.maxExperimentDuration = number(duration);
    }
    act(async () => {
      await send(`experiments/${id}/limits`, "PATCH", changes);
      return `Limits changed: ${Object.entries(changes).map(([k, v]) => `${k} ${v}`).join(", ")}.`;
    });
  };
  const addTrial = () => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(parameters);
    } catch (error) {
      setOutcome({ ok: false, text: `parameters: not JSON (${(error as Error).message})` });
      return;
    }
    act(async () => {
      const r = await send<{ waiting: number }>(`experiments/${id}/trials`, "POST", { parameters: parsed });
      return `Trial added: it runs next (${r.waiting} waiting).`;
    });
  };
  // the same statuses as the server's re-run (trialflow.steering.asked_trials.RERUNNABLE)
  const failed = ["FAILED", "USER_CANCELED", "EARLY_STOPPED", "SYS_CANCELED"]
    .reduce((n, s) => n + (summary.counts[s as keyof typeof summary.counts] ?? 0), 0);
  // the box is as tall as the parameters it holds (a ten-parameter space in three rows hid most)
  const rows = Math.min(16, Math.max(3, parameters.split("\n").length));
  return (
    <Panel title="Steer this experiment" testId="actions"
      actions={<Button size="xs" colorPalette="red" variant="outline" onClick={stop} disabled={busy} data-testid="stop-experiment">Stop experiment</Button>}>
      <HStack alignItems="flex-end" gap={3} flexWrap="wrap">
        <Box><Text asChild fontSize="xs" color="fg.muted" display="block"><label htmlFor="tf-limit-concurrency">trialConcurrency</label></Text>
          <Input id="tf-limit-concurrency" size="sm" w="110px" value={concurrency} onChange={(e) => setConcurrency(e.target.value)} data-testid="limit-concurrency" /></Box>
        <Box><Text asChild fontSize="xs" color="fg.muted" display="block"><label htmlFor="tf-limit-max-trials">maxTrialNumber</label></Text>
          <Input id="tf-limit-max-trials" size="sm" w="110px" value={maxTrials} onChange={(e) => setMaxTrials(e.target.value)} data-testid="limit-max-trials" /></Box>
        <Box><Text asChild fontSize="xs" color="fg.muted" display="block"><label htmlFor="tf-limit-duration">maxExperimentDuration (s, or 2h)</label></Text>
          <Input id="tf-limit-duration" size="sm" w="150px" value={duration} onChange={(e) => setDuration(e.target.value)} data-testid="limit-duration" /></Box>
        <Button size="sm" onClick={limits} disabled={busy} data-testid="apply-limits">Apply limits</Button>
        {failed ? <Button size="sm" variant="outline" onClick={rerunFailed} disabled={busy} data-testid="rerun-failed">Re-run {failed} failed or stopped</Button> : null}
      </HStack>
      <Box mt={3}>
        <Text asChild fontSize="xs" color="fg.muted" display="block"><label htmlFor="tf-add-trial-parameters">Add a trial with these parameters (prefilled from the best trial; checked against the search space)</label></Text>
        <HStack alignItems="flex-start" mt={1}>
          <Textarea id="tf-add-trial-parameters" size="sm" fontFamily="mono" rows={rows} value={parameters} onChange={(e) => setParameters(e.target.value)} data-testid="add-trial-parameters" />
          <Button size="sm" onClick={addTrial} disabled={busy} data-testid="add-trial">Add trial</Button>
        </HStack>
        {summary.waiting ? <Text fontSize="xs" color="fg.muted" mt={1}>{summary.waiting} asked-for trial(s) waiting to start</Text> : null}
      </Box>
      <SearchSpaceForm experimentId={summary.experiment_id} busy={busy} act={act} />
      <Feedback outcome={outcome} />
    </Panel>
  );
}

type SpaceVersion = { version: number; space: Record<string, unknown>; at: number | null; by: string | null };

// Change the search space while the experiment runs (nnictl update searchspace): prefilled with
// the newest version; the server checks it with validate's words and says which key is wrong.
function SearchSpaceForm({ experimentId, busy, act }: {
  experimentId: string; busy: boolean; act: (run: () => Promise<string>) => void;
}) {
  const id = encodeURIComponent(experimentId);
  const config = useLoad(() => getJson<{ search_spaces: SpaceVersion[] }>(`experiments/${id}/config`), [id]);
  const versions = config.data?.search_spaces ?? [];
  const newest = versions[versions.length - 1];
  const [text, setText] = useState<string | null>(null);
  const shown = text ?? (newest ? JSON.stringify(newest.space, null, 1) : "");
  if (!newest) return null;
  const apply = () => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(shown);
    } catch (error) {
      act(async () => { throw new Error(`search space: not JSON (${(error as Error).message})`); });
      return;
    }
    if (!window.confirm("Change the search space? Trials asked from now on sample from it.")) return;
    act(async () => {
      const r = await send<{ version: number }>(`experiments/${id}/search-space`, "PUT", parsed);
      setText(null);
      config.reload();
      return `Search space version ${r.version}: trials asked from now on sample from it.`;
    });
  };
  const rows = Math.min(16, Math.max(3, shown.split("\n").length));
  return (
    <Box mt={3}>
      <Text asChild fontSize="xs" color="fg.muted" display="block"><label htmlFor="tf-search-space">Search space (version {newest.version}; earlier trials outside a new space stay in the history and reach the tuner only where they fit)</label></Text>
      <HStack alignItems="flex-start" mt={1}>
        <Textarea id="tf-search-space" size="sm" fontFamily="mono" rows={rows} value={shown} onChange={(e) => setText(e.target.value)} data-testid="search-space" />
        <Button size="sm" onClick={apply} disabled={busy} data-testid="apply-search-space">Change search space</Button>
      </HStack>
    </Box>
  );
}

export function History({ experimentId, live }: { experimentId: string; live: boolean }) {
  const id = encodeURIComponent(experimentId);
  const history = useLoad(() => getJson<{ actions: HistoryEntry[] }>(`experiments/${id}/history`), [id], live);
  const entries = history.data?.actions ?? [];
  if (!entries.length) return null;
  return (
    <Panel title="What was done" testId="history">
      <Table.Root size="sm">
        <Table.Body>
          {[...entries].reverse().map((h, i) => (
            <Table.Row key={i}>
              <Table.Cell whiteSpace="nowrap">{formatTime(h.at)}</Table.Cell>
              <Table.Cell>{visible(h.by)}</Table.Cell>
              <Table.Cell>{visible(h.action)}</Table.Cell>
              <Table.Cell fontFamily="mono" fontSize="xs">{visible(h.detail)}</Table.Cell>
            </Table.Row>
          ))}
        </Table.Body>
      </Table.Root>
    </Panel>
  );
}

export function ConfigView({ experimentId }: { experimentId: string }) {
  const id = encodeURIComponent(experimentId);
  const config = useLoad(() => getJson<{ config: unknown; changed: Record<string, unknown>; search_spaces?: SpaceVersion[] }>(`experiments/${id}/config`), [id]);
  if (config.error && !config.data) return <ErrorBox error={config.error} />;
  if (!config.data) return <Loading />;
  const changed = Object.entries(config.data.changed ?? {});
  const spaces = config.data.search_spaces ?? [];
  return (
    <VStack alignItems="stretch" gap={3}>
      {changed.length ? (
        <Text fontSize="sm" data-testid="changed-limits">Changed while it ran: {changed.map(([k, v]) => `${k} ${v}`).join(", ")}</Text>
      ) : null}
      {spaces.length > 1 ? (
        <Panel title="Search space, version by version" testId="space-versions">
          <Table.Root size="sm">
            <Table.Body>
              {[...spaces].reverse().map((v) => (
                <Table.Row key={v.version} data-testid={`space-version-${v.version}`}>
                  <Table.Cell whiteSpace="nowrap" verticalAlign="top">version {v.version}</Table.Cell>
                  <Table.Cell whiteSpace="nowrap" verticalAlign="top">{v.at ? `${formatTime(v.at)} by ${visible(v.by ?? "")}` : "the config's"}</Table.Cell>
                  <Table.Cell><Code as="pre" display="block" whiteSpace="pre-wrap" fontSize="xs" p={1}>{visible(JSON.stringify(v.space))}</Code></Table.Cell>
                </Table.Row>
              ))}
            </Table.Body>
          </Table.Root>
        </Panel>
      ) : null}
      <Panel title="Effective config (read-only, secrets masked)" testId="config-view">
        <Code as="pre" display="block" whiteSpace="pre-wrap" fontSize="xs" p={2}>{visible(JSON.stringify(config.data.config, null, 2))}</Code>
      </Panel>
    </VStack>
  );
}

export function TrialActions({ experimentId, index, status, mayEdit, experimentActive, onChanged }: {
  experimentId: string; index: number; status: string; mayEdit: boolean; experimentActive: boolean; onChanged: () => void;
}) {
  const [outcome, setOutcome] = useState<Outcome>(null);
  // an ended experiment takes no action (the server answers 409): none is offered
  if (!mayEdit || !experimentActive) return null;
  const id = encodeURIComponent(experimentId);
  const running = status === "WAITING" || status === "RUNNING";
  const kill = () => {
    if (!window.confirm(`Kill trial ${index}? Its job is cancelled and its work is lost.`)) return;
    void attempt(async () => {
      await send(`experiments/${id}/trials/${index}/kill`, "POST");
      return "Asked to stop: it ends USER_CANCELED within seconds.";
    }, setOutcome, onChanged);
  };
  const rerun = () => void attempt(async () => {
    await send(`experiments/${id}/trials/${index}/rerun`, "POST");
    return "Queued again: a new trial runs with these parameters.";
  }, setOutcome, onChanged);
  return (
    <Box>
      <HStack gap={2}>
        {running
          ? <Button size="xs" colorPalette="red" variant="outline" onClick={kill} data-testid="kill-trial">Kill trial</Button>
          : <Button size="xs" variant="outline" onClick={rerun} data-testid="rerun-trial">Re-run with these parameters</Button>}
      </HStack>
      <Feedback outcome={outcome} />
    </Box>
  );
}
