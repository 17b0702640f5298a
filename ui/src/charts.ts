// ECharts options for the experiment page, built from the API's rows (pure functions).
import type { Curve, Objective, Status, Summary, TrialRow } from "./api";
import type { Option } from "./Chart";
import { STATUS_COLOR, distinctLabels, flatten, formatDuration, formatValue } from "./util";

const tooltipTrial = (row: TrialRow) =>
  `trial ${row.trial_index} (${row.status})${row.pareto ? " · Pareto set" : ""}` +
  `${row.earlier_space ? ` · earlier search space (version ${row.space_version ?? 0})` : ""}<br/>` +
  (row.values
    ? Object.entries(row.values).map(([k, v]) => `${escapeHtml(k)}: ${formatValue(v)}<br/>`).join("")
    : `metric: ${formatValue(row.metric)}<br/>`) +
  Object.entries(flatten(row.parameters))
    .map(([k, v]) => `${escapeHtml(k)}: ${escapeHtml(formatValue(v))}`)
    .join("<br/>");

/** Tooltips are HTML in ECharts: every value from the store is escaped first. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

/** Default metric per trial in trial order, and the best so far (minimise or maximise). */
const ANIMATION = { animation: false };

export function historyOption(rows: TrialRow[], mode: "maximize" | "minimize", objectives: Objective[] = []): Option {
  const done = rows.filter((r) => r.metric !== null).sort((a, b) => a.trial_index - b.trial_index);
  if (objectives.length > 1) return severalHistory(done, objectives);
  const earlier = done.filter((r) => r.earlier_space);
  let best: number | null = null;
  const bestLine = done.map((r) => {
    const value = r.metric as number;
    best = best === null ? value : mode === "minimize" ? Math.min(best, value) : Math.max(best, value);
    return [r.trial_index, best];
  });
  return {
    ...ANIMATION,
    tooltip: {
      trigger: "item",
      formatter: (p: { seriesIndex: number; data: unknown }) => {
        if (p.seriesIndex === 1) return `best so far: ${formatValue((p.data as number[])[1])}`;
        const row = done.find((r) => r.trial_index === (p.data as number[])[0]);
        return row ? tooltipTrial(row) : "";
      },
    },
    legend: { data: ["metric", `best so far (${mode})`, ...(earlier.length ? [EARLIER] : [])], top: 0 },
    grid: { left: 60, right: 40, top: 36, bottom: 36 },
    xAxis: { type: "value", name: "trial", minInterval: 1 },
    yAxis: { type: "value", name: "metric", scale: true },
    dataZoom: [{ type: "inside" }],
    series: [
      { name: "metric", type: "scatter", symbolSize: done.length > 500 ? 4 : 7, large: done.length > 1000,
        data: done.filter((r) => !r.earlier_space).map((r) => [r.trial_index, r.metric]),
        itemStyle: { color: STATUS_COLOR.SUCCEEDED } },
      { name: `best so far (${mode})`, type: "line", step: "end", showSymbol: false, data: bestLine,
        lineStyle: { width: 2 } },
      // trials asked under an earlier search space: kept, hollow (the best line counts them)
      ...(earlier.length
        ? [{ name: EARLIER, type: "scatter", symbol: "emptyCircle", symbolSize: done.length > 500 ? 4 : 7,
            data: earlier.map((r) => [r.trial_index, r.metric]), itemStyle: { color: EARLIER_COLOR } }]
        : []),
    ],
  };
}

/** Several objectives: the first objective per trial, the Pareto set marked (no single "best so far"). */
function severalHistory(done: TrialRow[], objectives: Objective[]): Option {
  const first = objectives[0];
  const point = (r: TrialRow) => [r.trial_index, r.values?.[first.metric] ?? r.metric];
  return {
    ...ANIMATION,
    tooltip: {
      trigger: "item",
      formatter: (p: { data: unknown }) => {
        const row = done.find((r) => r.trial_index === (p.data as number[])[0]);
        return row ? tooltipTrial(row) : "";
      },
    },
    legend: { data: ["trial", "Pareto set"], top: 0 },
    grid: { left: 60, right: 40, top: 36, bottom: 36 },
    xAxis: { type: "value", name: "trial", minInterval: 1 },
    yAxis: { type: "value", name: `${first.metric} (${first.mode})`, scale: true },
    dataZoom: [{ type: "inside" }],
    series: [
      { name: "trial", type: "scatter", symbolSize: done.length > 500 ? 4 : 7, large: done.length > 1000,
        data: done.filter((r) => !r.pareto).map(point), itemStyle: { color: STATUS_COLOR.SUCCEEDED, opacity: 0.6 } },
      { name: "Pareto set", type: "scatter", symbol: "diamond", symbolSize: diamondSize(done.filter((r) => r.pareto).length),
        data: done.filter((r) => r.pareto).map(point), itemStyle: { color: PARETO_COLOR } },
    ],
  };
}

const PARETO_COLOR = "#d9480f";
/** Trials asked under an earlier search space than the newest (a person changed it while it ran). */
const EARLIER = "earlier search space";
const EARLIER_COLOR = "#718096";
/** Big enough to pick out a handful of Pareto trials, small enough that a dense front of
 * hundreds (2,000 trials gave 163) does not bury the trials behind it. */
const diamondSize = (count: number) => (count > 100 ? 6 : count > 30 ? 9 : 12);

/** Two or three objectives against each other: every trial with all its values, the Pareto set
 * joined in the order of the first objective (a front: no point beyond it is better on both).
 * With three, the third is each point's colour. */
export function paretoOption(rows: TrialRow[], objectives: Objective[]): Option {
  const [a, b, c] = objectives;
  const done = rows.filter((r) => r.values);
  const value = (r: TrialRow, o: Objective) => (r.values as Record<string, number>)[o.metric];
  const point = (r: TrialRow) => [value(r, a), value(r, b), c ? value(r, c) : 0, r.trial_index];
  const front = done.filter((r) => r.pareto).sort((x, y) => value(x, a) - value(y, a));
  const thirds = c ? done.map((r) => value(r, c)) : [];
  const axisName = (o: Objective) => `${o.metric} (${o.mode === "maximize" ? "higher" : "lower"} is better)`;
  return {
    ...ANIMATION,
    tooltip: {
      trigger: "item",
      formatter: (p: { data: unknown }) => {
        const row = done.find((r) => r.trial_index === (p.data as number[])[3]);
        return row ? tooltipTrial(row) : "";
      },
    },
    legend: { data: ["trial", "Pareto set"], top: 0 },
    grid: { left: 70, right: c ? 90 : 40, top: 40, bottom: 50 },
    xAxis: { type: "value", name: axisName(a), nameLocation: "middle", nameGap: 28, scale: true },
    yAxis: { type: "value", name: axisName(b), scale: true },
    ...(c ? {
      visualMap: { type: "continuous", dimension: 2, seriesIndex: 0, right: 0, top: "middle", text: [c.metric, ""],
        min: Math.min(...thirds), max: Math.max(...thirds), calculable: true,
        inRange: { color: c.mode === "maximize" ? ["#c6dbef", "#08306b"] : ["#08306b", "#c6dbef"] } },
    } : {}),
    series: [
      { name: "trial", type: "scatter", symbolSize: done.length > 500 ? 5 : 8,
        data: done.filter((r) => !r.pareto).map(point), itemStyle: { color: STATUS_COLOR.SUCCEEDED, opacity: 0.7 } },
      // A front of two is a curve; of three, its projection is not: the members stand alone.
      { name: "Pareto set", type: c ? "scatter" : "line", symbol: "diamond", symbolSize: diamondSize(front.length),
        data: front.map(point), itemStyle: { color: PARETO_COLOR }, lineStyle: { color: PARETO_COLOR, type: "dashed" } },
    ],
  };
}

function logAxes(summary: Summary | undefined): Set<string> {
  const out = new Set<string>();
  const walk = (space: Record<string, { _type: string; _value: unknown[] }> | null | undefined, prefix: string) => {
    for (const [key, spec] of Object.entries(space ?? {})) {
      if (!spec || typeof spec !== "object") continue;
      if (/log/.test(spec._type ?? "")) out.add(`${prefix}${key}`);
      if (spec._type === "choice") {
        for (const option of spec._value ?? []) {
          if (option && typeof option === "object" && "_name" in (option as object)) {
            walk(option as Record<string, { _type: string; _value: unknown[] }>, `${prefix}${key}/`);
          }
        }
      }
    }
  };
  walk(summary?.config.searchSpace, "");
  return out;
}

/** Parameters against the metric: one axis per flattened parameter (numbers, log-scaled where the
 * search space says so, or categories), coloured by the metric. */
export function parallelOption(rows: TrialRow[], summary: Summary | undefined, colorMode: "light" | "dark" = "light"): Option {
  const done = rows.filter((r) => r.metric !== null);
  const flat = done.map((r) => flatten(r.parameters));
  const names = Array.from(new Set(flat.flatMap((f) => Object.keys(f)))).sort();
  const logs = logAxes(summary);
  // short labels that still differ (the full name on hover, below)
  const labels = distinctLabels(names);
  const axes = names.map((name, dim) => {
    const values = flat.map((f) => f[name]);
    const numeric = values.every((v) => v === undefined || typeof v === "number");
    if (numeric) {
      const positive = values.every((v) => v === undefined || (v as number) > 0);
      return { dim, name: labels[dim], type: logs.has(name) && positive ? "log" : "value", scale: true };
    }
    const categories = Array.from(new Set(values.map((v) => formatValue(v)))).sort();
    return { dim, name: labels[dim], type: "category", data: categories };
  });
  const several = summary?.objectives?.length ?? 0;
  axes.push({ dim: names.length, name: several > 1 ? summary!.objectives[0].metric : "metric", type: "value", scale: true });
  const metrics = done.map((r) => r.metric as number);
  const data = done.map((r, i) => {
    const value = [
      ...names.map((name, dim) => {
        const v = flat[i][name];
        return (axes[dim] as { type: string }).type === "category" ? formatValue(v) : v ?? null;
      }),
      r.metric,
    ];
    // an earlier search space's trial: dashed and fainter, still drawn
    return r.earlier_space ? { value, lineStyle: { type: "dashed", opacity: 0.35 } } : value;
  });
  return {
    ...ANIMATION,
    tooltip: { trigger: "item", formatter: (p: { dataIndex: number; componentType?: string; name?: string }) =>
      // an axis name hovered: its parameter's full name
      p.componentType === "parallelAxis" ? escapeHtml(names[labels.indexOf(String(p.name))] ?? String(p.name)) : tooltipTrial(done[p.dataIndex]) },
    // Each label on a patch of the page's colour: with thousands of trials the lines crossing
    // the axes made the category names ("sgd", "adam") and the ticks unreadable.
    parallelAxis: axes.map((axis) => ({ ...axis, triggerEvent: true, nameTextStyle: { fontSize: 11 }, axisLabel: { fontSize: 10,
      backgroundColor: colorMode === "dark" ? "rgba(12, 12, 16, 0.95)" : "rgba(255, 255, 255, 0.95)",
      padding: [1, 3], borderRadius: 2 } })),
    parallel: { left: 50, right: 125, top: 40, bottom: 30 },
    visualMap: metrics.length
      ? { min: Math.min(...metrics), max: Math.max(...metrics), dimension: names.length, calculable: true,
          // align "left": the handles' values sit right of the bar, not on the metric axis's labels
          right: 4, top: "middle", align: "left", itemHeight: 120, precision: 3, textStyle: { fontSize: 10 }, inRange: { color: ["#3182ce", "#38a169", "#ecc94b", "#e53e3e"] } }
      : undefined,
    // progressive: 0 draws every line in one frame: at 20,000 trials ECharts' default (300 lines a
    // frame) took 4.5 s to finish the page's charts (bench/ui.py), one frame of all of them far less
    series: [{ type: "parallel", lineStyle: { width: 1.5, opacity: 0.6 }, progressive: 0, data }],
  };
}

/** Intermediate results per trial; early-stopped trials dashed, with a cross where they stopped. */
/** Whether any of the curves has a point (an empty chart says so in words instead). */
export const anyPoints = (curves: Curve[] | undefined) => (curves ?? []).some((c) => c.points.length > 0);

export function curvesOption(curves: Curve[]): Option {
  return {
    ...ANIMATION,
    tooltip: { trigger: "item", formatter: (p: { seriesName: string; data: number[] }) =>
      `${escapeHtml(p.seriesName)}<br/>step ${p.data[0]}: ${formatValue(p.data[1])}` },
    legend: { type: "scroll", bottom: 0 },
    // room above the plot for the axis name, which otherwise sits on the chart's subtitle
    grid: { left: 60, right: 24, top: 36, bottom: 50 },
    xAxis: { type: "value", name: "step", minInterval: 1 },
    yAxis: { type: "value", name: "intermediate", scale: true },
    dataZoom: [{ type: "inside" }],
    series: curves.map((curve) => {
      const stopped = curve.status === "EARLY_STOPPED";
      const last = curve.points[curve.points.length - 1];
      return {
        name: `trial ${curve.trial_index}${stopped ? " (stopped)" : ""}`,
        type: "line",
        showSymbol: curve.points.length < 30,
        data: curve.points,
        lineStyle: { type: stopped ? "dashed" : "solid", width: 1.5 },
        markPoint: stopped && last
          ? { symbol: "pin", symbolSize: 28, data: [{ coord: last, value: "✕" }], label: { fontSize: 10 } }
          : undefined,
      };
    }),
  };
}

/** Charts that draw a line or a bar per trial draw at most this many (see drawnRows). */
export const DRAWN_CAP = 1000;

/** The trials a per-trial chart draws: all of them up to ``cap``; past it the best quarter of
 * the cap by metric, every running trial and an even spread of the others. 20,000 lines are an
 * opaque mass on a 300-pixel chart and took the page 4.5 s to finish drawing (bench/ui.py). */
export function drawnRows(rows: TrialRow[], mode: "maximize" | "minimize", cap: number = DRAWN_CAP): TrialRow[] {
  if (rows.length <= cap) return rows;
  const scored = rows.filter((r) => r.metric !== null)
    .sort((a, b) => (mode === "minimize" ? 1 : -1) * ((a.metric as number) - (b.metric as number)));
  const keep = new Set<number>(scored.slice(0, Math.floor(cap / 4)).map((r) => r.trial_index));
  for (const r of rows) if (r.status === "RUNNING" || r.status === "WAITING") keep.add(r.trial_index);
  const rest = rows.filter((r) => !keep.has(r.trial_index));
  const room = Math.max(0, cap - keep.size);
  for (let i = 0; i < room; i++) keep.add(rest[Math.floor((i * rest.length) / room)].trial_index);
  return rows.filter((r) => keep.has(r.trial_index));
}

/** When each trial ran: a bar per drawn trial (start to end), and how many trials ran at once:
 * the server's series over every trial when given (the drawn trials may be a sample), else
 * counted from the rows. */
export function timelineOption(rows: TrialRow[], concurrency?: [number, number][]): Option {
  const bars = rows.filter((r) => r.started !== null);
  if (!bars.length && !concurrency?.length) return { title: { text: "no trial has started", left: "center", top: "middle" } };
  const now = Date.now() / 1000;
  const series = concurrency ?? countedAtOnce(bars, now);
  const times = [...series.map(([t]) => t), ...bars.flatMap((r) => [(r.started as number) * 1000, ((r.ended ?? now) as number) * 1000])];
  let first = Infinity;
  let last = -Infinity;
  for (const t of times) {
    first = Math.min(first, t);
    last = Math.max(last, t);
  }
  let top = 0;
  for (const r of bars) top = Math.max(top, r.trial_index);
  return {
    ...ANIMATION,
    tooltip: {
      trigger: "item",
      formatter: (p: { seriesIndex: number; data: { trial_index?: number } & number[] }) => {
        if (p.seriesIndex === 1) return `${p.data[1]} running`;
        const row = bars.find((r) => r.trial_index === p.data.trial_index);
        return row ? `trial ${row.trial_index} (${row.status}), ${formatDuration(row.duration)}` : "";
      },
    },
    // the bars take their status's colour (one swatch could not stand for them): only the line has a legend
    legend: { data: ["running at once"], top: 0 },
    grid: [{ left: 60, right: 24, top: 36, bottom: "34%" }, { left: 60, right: 24, top: "74%", bottom: 28 }],
    // a lines series does not size its axes: the extent is given
    xAxis: [{ type: "time", gridIndex: 0, axisLabel: { show: false }, min: first, max: last },
      { type: "time", gridIndex: 1, min: first, max: last }],
    // an inverse axis puts its name at its end, the bottom, on top of "running": name it at the top
    yAxis: [{ type: "value", name: "trial", nameLocation: "start", gridIndex: 0, minInterval: 1, inverse: true, min: -0.5,
      max: top + 0.5,
      axisLabel: { formatter: (v: number) => (Number.isInteger(v) ? String(v) : "") } },
      // the running count's strip is ~50 px high: two ticks, or its labels overlap (2,100 trials did)
      { type: "value", name: "running", gridIndex: 1, minInterval: 1, splitNumber: 2 }],
    dataZoom: [{ type: "inside", xAxisIndex: [0, 1] }],
    series: [
      {
        // one segment per trial, drawn in one batch (a custom series is ~10x slower at 2,000)
        name: "trials",
        type: "lines",
        coordinateSystem: "cartesian2d",
        progressive: 0,  // one frame for every segment (see the parallel chart)
        xAxisIndex: 0,
        yAxisIndex: 0,
        lineStyle: { width: Math.max(2, Math.min(10, 300 / bars.length)), opacity: 0.9, cap: "butt" },
        data: bars.map((r) => ({
          trial_index: r.trial_index,
          coords: [[(r.started as number) * 1000, r.trial_index], [((r.ended ?? now) as number) * 1000, r.trial_index]],
          lineStyle: { color: STATUS_COLOR[r.status as Status] ?? "#999" },
        })),
      },
      { name: "running at once", type: "line", step: "end", xAxisIndex: 1, yAxisIndex: 1, showSymbol: false,
        data: series, areaStyle: { opacity: 0.2 } },
    ],
  };
}

/** How many of ``rows`` ran at each start or end ([ms, count]); a trial not ended runs until now. */
function countedAtOnce(rows: TrialRow[], now: number): [number, number][] {
  const events: [number, number][] = [];
  for (const r of rows) {
    events.push([r.started as number, 1]);
    events.push([(r.ended ?? now) as number, -1]);
  }
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let running = 0;
  return events.map(([t, d]) => {
    running += d;
    return [t * 1000, running];
  });
}

export function importanceOption(importances: Record<string, number>): Option {
  const entries = Object.entries(importances).sort((a, b) => a[1] - b[1]);
  return {
    ...ANIMATION,
    tooltip: { trigger: "item", formatter: (p: { name: string; value: number }) =>
      `${escapeHtml(p.name)}: ${(p.value * 100).toFixed(1)}%` },
    grid: { left: 120, right: 40, top: 10, bottom: 30 },
    xAxis: { type: "value", max: 1, axisLabel: { formatter: (v: number) => `${Math.round(v * 100)}%` } },
    yAxis: { type: "category", data: entries.map(([k]) => k) },
    series: [{ type: "bar", data: entries.map(([, v]) => v), itemStyle: { color: "#3182ce" } }],
  };
}

export function detailOption(points: [number, number | null][], status: Status): Option {
  return {
    ...ANIMATION, // drawn whole at once, as the other charts (a screenshot caught it half drawn)
    tooltip: { trigger: "axis" },
    grid: { left: 60, right: 24, top: 30, bottom: 40 },
    xAxis: { type: "value", name: "step", minInterval: 1 },
    yAxis: { type: "value", name: "intermediate", scale: true },
    series: [{ type: "line", data: points, showSymbol: points.length < 50,
      lineStyle: { type: status === "EARLY_STOPPED" ? "dashed" : "solid" } }],
  };
}
