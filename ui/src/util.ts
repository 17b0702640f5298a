// Small pure helpers shared by the pages.
import type { Status } from "./api";

export const STATUS_PALETTE: Record<Status, string> = {
  WAITING: "gray",
  RUNNING: "blue",
  SUCCEEDED: "green",
  FAILED: "red",
  USER_CANCELED: "purple",
  SYS_CANCELED: "pink",
  EARLY_STOPPED: "orange",
};

export const STATUS_COLOR: Record<Status, string> = {
  WAITING: "#a0aec0",
  RUNNING: "#3182ce",
  SUCCEEDED: "#38a169",
  FAILED: "#e53e3e",
  USER_CANCELED: "#805ad5",
  SYS_CANCELED: "#d53f8c",
  EARLY_STOPPED: "#dd6b20",
};

export function flatten(parameters: Record<string, unknown>, prefix = ""): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(parameters ?? {})) {
    const name = `${prefix}${key}`;
    if (value && typeof value === "object" && !Array.isArray(value) && "_name" in (value as object)) {
      const nested = value as Record<string, unknown>;
      out[name] = nested._name;
      const rest = { ...nested };
      delete rest._name;
      Object.assign(out, flatten(rest, `${name}/`));
    } else if (value && typeof value === "object") {
      out[name] = JSON.stringify(value);
    } else {
      out[name] = value;
    }
  }
  return out;
}

// Bidirectional controls (embeddings, overrides, isolates, marks): in a name they reorder what
// follows ('quotes' displayed as 'setouq'), so a person would read something that is not there.
const BIDI_CONTROLS = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/** Text as a person should read it: every bidirectional control shown as a visible ⟨U+XXXX⟩. */
/** Axis labels that tell nested parameters apart: each name's last path segment, with as many
 * segments before it as it takes to differ from the others' (``…/gbr/max_depth`` beside
 * ``…/rf/max_depth``), so several "model/…" axes no longer read the same. */
export function distinctLabels(names: string[]): string[] {
  const parts = names.map((n) => n.split("/"));
  const depth = parts.map(() => 1);
  for (let round = 0; round < 8; round++) {
    const shown = parts.map((p, i) => p.slice(-depth[i]).join("/"));
    let changed = false;
    shown.forEach((label, i) => {
      if (shown.some((other, j) => j !== i && other === label) && depth[i] < parts[i].length) {
        depth[i] += 1;
        changed = true;
      }
    });
    if (!changed) break;
  }
  return parts.map((p, i) => (depth[i] < p.length ? "…/" : "") + p.slice(-depth[i]).join("/"));
}

export function visible(text: string | null | undefined): string {
  if (!text) return text ?? "";
  return text.replace(BIDI_CONTROLS, (c) => `⟨U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`);
}

export function formatValue(value: unknown): string {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toPrecision(6).replace(/\.?0+($|e)/, "$1");
  if (typeof value === "string") return visible(value);
  return visible(JSON.stringify(value));
}

/** Parameters as "name = value" pairs (nested choices flattened), for a line of text. */
export function formatParameters(parameters: Record<string, unknown>): string {
  return Object.entries(flatten(parameters)).map(([k, v]) => `${visible(k)} = ${formatValue(v)}`).join(" · ");
}

/** Handle fields that are times (epoch seconds): shown as a date, the exact number beside it. */
export function formatHandleValue(key: string, value: unknown): string {
  if (typeof value === "number" && (key === "started" || key.endsWith("_at")) && value > 1e9) {
    return `${formatTime(value)} (${String(value)})`;
  }
  return typeof value === "number" ? String(value) : formatValue(value);
}

export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

export function formatBytes(size: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = size;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${size} B` : `${value.toFixed(1)} ${units[unit]}`;
}

export function formatTime(epoch: number | null | undefined): string {
  if (!epoch) return "";
  return new Date(epoch * 1000).toLocaleString();
}

export function airflowUrl(path: string): string {
  return new URL(path.replace(/^\//, ""), document.baseURI).toString();
}
