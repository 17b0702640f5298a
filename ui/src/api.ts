// The plugin's data API (its FastAPI app, trialflow.ui.api), same origin: Airflow's login cookie goes along.

export type Status =
  | "WAITING" | "RUNNING" | "SUCCEEDED" | "FAILED" | "USER_CANCELED" | "SYS_CANCELED" | "EARLY_STOPPED";

export const STATUSES: Status[] = [
  "WAITING", "RUNNING", "SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED", "EARLY_STOPPED",
];

export interface ExperimentRow {
  experiment_id: string;
  name: string | null;
  dag_id: string | null;
  /** The experiment task group of the DAG whose experiment this is (null: the whole DAG's). */
  task_group?: string | null;
  /** NNI's experiment id, for one `trialflow import-nni` brought in. */
  imported_from?: string | null;
  run_id: string | null;
  platform: string | null;
  tuner: string | null;
  optimize_mode: "maximize" | "minimize";
  counts: Partial<Record<Status, number>>;
  trials: number;
  best: number | null;
  /** Several objectives: the Pareto set's size (best is null: there is no single best). */
  pareto_size?: number | null;
  started: number | null;
  ended: number | null;
  max_trial_number: number | null;
  active: boolean;
  state: string;
  dag_exists: boolean;
}

export interface TrialRow {
  trial_index: number;
  trial_id: string | null;
  status: Status;
  parameters: Record<string, unknown>;
  final: unknown;
  metric: number | null;
  message: string | null;
  platform: string | null;
  host: string | null;
  started: number | null;
  ended: number | null;
  duration: number | null;
  intermediate_count: number;
  /** NNI's parameter.cfg word: "customized" when a person chose the parameters (added trial, re-run). */
  parameter_source?: "algorithm" | "customized";
  added_by?: string | null;
  /** Brought in from NNI (trialflow import-nni): it ran there, its times are NNI's (null: unrecorded). */
  imported?: boolean;
  /** Its nested run in MLflow, where the experiment is tracked. */
  mlflow_url?: string | null;
  map_index?: number | null;
  /** Several objectives: the trial's value of each (null until it has all), and whether it is in the Pareto set. */
  values?: Record<string, number> | null;
  pareto?: boolean;
  /** The search space version it was asked under (0: the config's), and whether a newer one exists:
   * a person changed the space while the experiment ran (its trials stay, marked). */
  space_version?: number;
  earlier_space?: boolean;
}

export interface Objective {
  metric: string;
  mode: "maximize" | "minimize";
}

/** The charts' data: every trial up to the server's cap, a sample past it (record setters, the
 * best, the running, the Pareto set, an even spread), with the running-at-once series over all. */
export interface ChartData {
  trials: TrialRow[];
  total: number;
  sampled: boolean;
  /** Every trial that set a new best is among ``trials``: the best-so-far line drawn is every trial's. */
  whole_best_line: boolean;
  /** [epoch ms, trials running] at each start or end, thinned keeping each stretch's low and high. */
  concurrency: [number, number][];
}

export interface Summary {
  experiment_id: string;
  name: string | null;
  dag_id: string | null;
  /** The experiment task group of the DAG whose experiment this is (null: the whole DAG's). */
  task_group?: string | null;
  run_id: string | null;
  platform: string | null;
  optimize_mode: "maximize" | "minimize";
  directory: string | null;
  counts: Partial<Record<Status, number>>;
  trials: number;
  active: boolean;
  state: string;
  best: TrialRow | null;
  started: number | null;
  ended: number | null;
  deadline: number | null;
  runs: { run_id: string; first_index: number; count: number; deadline: number | null }[];
  /** Who stopped it, when and why (a person's stop, or its DAG run marked failed); null otherwise. */
  stopped: { by: string | null; at: number | null; reason: string | null } | null;
  config: {
    tuner: { name?: string; className?: string; classArgs?: Record<string, unknown> } | null;
    assessor: { name?: string } | null;
    trialConcurrency: number | null;
    maxTrialNumber: number | null;
    maxExperimentDuration: number | null;
    maxTrialDuration: number | null;
    trialCommand: string | null;
    platforms: string[];
    searchSpace: Record<string, { _type: string; _value: unknown[] }> | null;
  };
  links: { dag_run: string | null; grid: string | null };
  /** Limits a person changed while it ran (their new values). */
  changed: Record<string, number>;
  /** scheduledRuns: retune: the experiment whose best sets ran first here, and those that re-tuned this one. */
  retuned_from: { experiment_id: string; queued: number; dropped: number } | null;
  retuned_by: string[];
  /** warmStart: the experiment this one started from, and those that started from this one. */
  warm_started_from?: { experiment_id: string; use: "results" | "rerun"; learnt: number; queued: number; dropped: number } | null;
  warm_started_by?: string[];
  /** An experiment `trialflow import-nni` brought in (its times are NNI's). */
  imported_from?: { system: string; nni_id: string; swapped: number } | null;
  /** Population Based Training: its size, the generations the trial budget makes, and each
   * generation's trials and how many of them ended. */
  population?: { size: number; planned: number | null; generations: { generation: number; trials: number; ended: number }[] } | null;
  /** MLflow (the config's mlflow key): the experiment's run page, and since when the server is away. */
  mlflow?: { run_url: string | null; away: { since: number | null; error: string } | null } | null;
  /** Several objectives (else empty): "best" is the Pareto set, first member by the first objective. */
  objectives: Objective[];
  pareto: TrialRow[];
  may_edit: boolean;
  waiting: number;
}

export interface HistoryEntry {
  at: number;
  by: string;
  action: string;
  detail: string;
}

export interface Page {
  total: number;
  offset: number;
  limit: number;
  rows: TrialRow[];
}

export interface Curve {
  trial_index: number;
  status: Status;
  points: [number, number | null][];
}

export interface TrialDetail extends TrialRow {
  /** Its experiment's state (running, success, stopped...) and whether actions may still act. */
  experiment_state?: string;
  experiment_active?: boolean;
  handle: Record<string, unknown>;
  final_extra: Record<string, unknown>;
  intermediate: [number, number | null][];
  intermediate_total?: number;
  /** The search space version it was asked under, and the experiment's newest (0: never changed). */
  space_version?: number;
  space_versions?: number;
  log: { name: string; text: string }[];
  location: string | null;
  links: { label: string; href: string }[];
  may_edit?: boolean;
  /** Who acted on its task or DAG run with Airflow's own buttons (Airflow's audit log). */
  airflow_actions?: { at: number | null; by: string | null; event: string; state: string | null }[];
  /** Each restart after a fault: the attempt it began, the checkpoint step it loaded (null: from
   * scratch), when and why. */
  restarts?: { attempt: number; step: number | null; at: number; reason: string }[];
  /** Population Based Training: its generation and member, the trial whose checkpoint it started
   * from (null in the first generation), whether it copied that trial's parameters (perturbed),
   * the checkpoint step it was given, or why it was given none. */
  lineage?: {
    generation: number;
    member: number;
    parent_index: number | null;
    parent_trial_id: string | null;
    exploited: boolean;
    loaded_step: number | null;
    note: string | null;
  } | null;
  /** What the ended trial kept in the artifact store (name, bytes), or why it cannot be listed. */
  artifacts?: { name: string; size: number }[];
  artifacts_error?: string | null;
}

export class ApiError extends Error {
  constructor(public status: number, message: string) {
    super(message);
  }
}

export function apiUrl(path: string, params?: Record<string, string | number | boolean | undefined | null>): string {
  const url = new URL(`trialflow/api/${path}`, document.baseURI);
  for (const [key, value] of Object.entries(params ?? {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, String(value));
  }
  return url.toString();
}

const prefetched = new Map<string, Promise<Response>>();

/** Start loading what the page will ask for first while React is still mounting it (each
 * prefetched answer is used once: refreshes always go to the server). */
export function prefetch(path: string, params?: Record<string, string | number | boolean | undefined | null>): void {
  const url = apiUrl(path, params);
  if (!prefetched.has(url)) prefetched.set(url, fetch(url, { credentials: "same-origin" }));
}

export async function getJson<T>(path: string, params?: Record<string, string | number | boolean | undefined | null>): Promise<T> {
  const url = apiUrl(path, params);
  const early = prefetched.get(url);
  prefetched.delete(url);
  const response = await (early ?? fetch(url, { credentials: "same-origin" }));
  if (!response.ok) {
    let detail = response.statusText;
    try {
      detail = (await response.json()).detail ?? detail;
    } catch {
      /* not JSON */
    }
    throw new ApiError(response.status, String(detail));
  }
  return (await response.json()) as T;
}

/** An action (POST/PATCH): Airflow's cookie goes along; a refusal throws its detail. */
export async function send<T>(path: string, method: "POST" | "PATCH" | "PUT", body?: unknown): Promise<T> {
  const response = await fetch(apiUrl(path), {
    method,
    credentials: "same-origin",
    headers: body === undefined ? {} : { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) {
    let detail = response.statusText;
    try {
      const parsed = (await response.json()).detail;
      detail = typeof parsed === "string" ? parsed : JSON.stringify(parsed);
    } catch {
      /* not JSON */
    }
    throw new ApiError(response.status, detail);
  }
  return (await response.json()) as T;
}
