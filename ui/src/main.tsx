// trialflow's pages inside Airflow. Airflow loads this script for each react_apps entry of the
// plugin and renders globalThis[name] with {dagId, runId, taskId, mapIndex}: the same app serves
// the nav page (every experiment), the DAG tab (its runs' experiments) and the DAG run tab (the
// run's experiment). Drill-down state lives in the page's query string.
import { useEffect, useState } from "react";
import { Box, Button, HStack, Text } from "@chakra-ui/react";
import { type ExperimentRow, getJson, prefetch } from "./api";
import { ErrorBox, Loading } from "./common";
import { ExperimentList } from "./ExperimentList";
import { ExperimentPage } from "./ExperimentPage";
import { useLoad, useUrlState } from "./hooks";
import { TrialPage } from "./TrialPage";

interface Props {
  dagId?: string;
  runId?: string;
  taskId?: string;
  mapIndex?: string;
}

function Experiment({ experimentId, embedded }: { experimentId: string; embedded?: boolean }) {
  const [params, update] = useUrlState();
  const trial = params.get("trial");
  const selected = (params.get("compare") ?? "").split(",").filter(Boolean).map(Number).filter(Number.isFinite);
  if (trial !== null) {
    return <TrialPage key={trial} experimentId={experimentId} index={Number(trial)} onBack={() => update({ trial: null })}
      onOpenTrial={(index) => update({ trial: String(index) })} />;
  }
  return (
    <ExperimentPage experimentId={experimentId} tab={params.get("tab") ?? "overview"} selected={selected}
      embedded={embedded}
      onTab={(tab) => update({ tab }, true)}
      onSelect={(indexes) => update({ compare: indexes.join(",") || null }, true)}
      onOpenTrial={(index) => update({ trial: String(index) })} />
  );
}

/** What the resolve route says of a DAG run: the experiment a task meant, and all of the run's. */
interface Resolved {
  experiment_id: string;
  trial_index: number | null;
  experiments?: { experiment_id: string; task_group: string | null; name: string | null }[];
}

/** A link from a trial task instance (?dag_id&run_id&map_index[&task_id]): find its experiment and trial. */
function Resolve({ dagId, runId, mapIndex, taskId }: { dagId: string; runId: string; mapIndex: string | null; taskId: string | null }) {
  const [, update] = useUrlState();
  const { data, error } = useLoad(() => getJson<Resolved>("resolve",
    { dag_id: dagId, run_id: runId, map_index: mapIndex, task_id: taskId }), [dagId, runId, mapIndex, taskId]);
  useEffect(() => {
    if (data) {
      update({ dag_id: null, run_id: null, map_index: null, task_id: null, experiment: data.experiment_id,
        trial: data.trial_index === null ? null : String(data.trial_index) }, true);
    }
  }, [data, update]);
  if (error) return <ErrorBox error={error} />;
  return <Loading />;
}

export function ExperimentsApp(props: Props) {
  const [params, update] = useUrlState();
  const experiment = params.get("experiment");
  const linkDag = params.get("dag_id");
  const linkRun = params.get("run_id");
  if (linkDag && linkRun) {
    return <Resolve dagId={linkDag} runId={linkRun} mapIndex={params.get("map_index")} taskId={params.get("task_id")} />;
  }
  if (experiment) {
    return (
      <Box>
        <Text fontSize="sm" mb={2}><a href="?" onClick={(e) => { e.preventDefault(); update({ experiment: null, trial: null, tab: null, compare: null }); }}>← all experiments</a></Text>
        <Experiment experimentId={experiment} />
      </Box>
    );
  }
  return <ExperimentList dagId={props.dagId} onOpen={(row: ExperimentRow) => update({ experiment: row.experiment_id })} />;
}

/** The DAG run tab: that run's experiment, or a choice of its experiments (one per task group). */
export function RunExperimentApp({ dagId, runId }: Props) {
  const { data, error } = useLoad(() => getJson<Resolved>("resolve",
    { dag_id: dagId, run_id: runId }), [dagId, runId]);
  const [chosen, choose] = useState<string | null>(null);
  if (error) {
    if ((error as { status?: number }).status === 404) return <Text color="fg.muted" p={2}>This DAG run has no trialflow experiment.</Text>;
    return <ErrorBox error={error} />;
  }
  if (!data?.experiment_id) return <Loading />;
  const all = data.experiments ?? [];
  const shown = chosen ?? data.experiment_id;
  return (
    <Box>
      {all.length > 1 ? (
        <HStack gap={2} mt={2} mb={3} wrap="wrap" data-testid="run-experiments">
          <Text fontSize="sm" color="fg.muted">This run holds {all.length} experiments:</Text>
          {all.map((e) => (
            <Button key={e.experiment_id} size="xs" variant={e.experiment_id === shown ? "solid" : "outline"}
              onClick={() => choose(e.experiment_id)} data-testid={`run-experiment-${e.task_group ?? "dag"}`}>
              {e.task_group ?? "DAG"}{e.name ? ` · ${e.name}` : ""} ({e.experiment_id})
            </Button>
          ))}
        </HStack>
      ) : null}
      <Experiment key={shown} experimentId={shown} embedded />
    </Box>
  );
}

// Opening an experiment's page: its data is on the way before React has mounted anything.
const opening = new URLSearchParams(window.location.search);
const openingId = opening.get("experiment");
if (openingId && opening.get("trial") === null && (opening.get("tab") ?? "overview") === "overview") {
  const id = encodeURIComponent(openingId);
  for (const path of [`experiments/${id}`, `experiments/${id}/chart`, `experiments/${id}/curves`]) prefetch(path);
}

const target = globalThis as unknown as Record<string, unknown>;
target["Experiments"] = ExperimentsApp;
target["Experiment"] = RunExperimentApp;
target["Trialflow experiments"] = ExperimentsApp;
target.AirflowPlugin = ExperimentsApp;
