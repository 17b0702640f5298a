// The trial table: sorted, filtered and paginated on the server; rows open a trial; 2-5 selected
// trials can be compared.
import { useState } from "react";
import { Box, Button, HStack, Input, Link, Table, Text } from "@chakra-ui/react";
import { type Page, STATUSES, type Status, type Summary, getJson } from "./api";
import { ErrorBox, Loading, StatusBadge } from "./common";
import { useLoad } from "./hooks";
import { flatten, formatDuration, formatValue } from "./util";

const PAGE_SIZE = 25;

export function paramNames(summary: Summary | undefined): string[] {
  const names: string[] = [];
  const walk = (space: Record<string, { _type: string; _value: unknown[] }> | null | undefined, prefix: string) => {
    for (const [key, spec] of Object.entries(space ?? {})) {
      names.push(`${prefix}${key}`);
      if (spec?._type === "choice") {
        for (const option of spec._value ?? []) {
          if (option && typeof option === "object" && "_name" in (option as object)) {
            const { _name: _, ...rest } = option as Record<string, unknown>;
            walk(Object.fromEntries(Object.entries(rest).filter(([, v]) => v && typeof v === "object" && "_type" in (v as object))) as Record<string, { _type: string; _value: unknown[] }>, `${prefix}${key}/`);
          }
        }
      }
    }
  };
  walk(summary?.config.searchSpace, "");
  return Array.from(new Set(names));
}

/** The search space's parameters (flattened), then any other key the trials carry (NNI's
 * advisors add TRIAL_BUDGET). */
export function columnNames(summary: Summary | undefined, parameters: Record<string, unknown>[]): string[] {
  const names = paramNames(summary);
  for (const p of parameters) for (const key of Object.keys(flatten(p))) if (!names.includes(key)) names.push(key);
  return names;
}

export function TrialTable({ experimentId, summary, live, selected, onSelect, onOpen }: {
  experimentId: string;
  summary: Summary | undefined;
  live: boolean;
  selected: number[];
  onSelect: (indexes: number[]) => void;
  onOpen: (index: number) => void;
}) {
  const [sort, setSort] = useState<{ key: string; desc: boolean }>({ key: "index", desc: false });
  const [statuses, setStatuses] = useState<Status[]>([]);
  const [search, setSearch] = useState("");
  const [offset, setOffset] = useState(0);
  const { data, error, loading } = useLoad(
    () => getJson<Page>(`experiments/${encodeURIComponent(experimentId)}/trials`, {
      sort: sort.key, desc: sort.desc, status: statuses.join(","), search, offset, limit: PAGE_SIZE,
    }),
    [experimentId, sort.key, sort.desc, statuses.join(","), search, offset], live);
  const params = columnNames(summary, (data?.rows ?? []).map((r) => r.parameters));
  const objectives = (summary?.objectives ?? []).length > 1 ? summary!.objectives : [];
  const header = (key: string, label: string) => (
    <Table.ColumnHeader key={key} cursor="pointer" userSelect="none" data-sort={key} whiteSpace="nowrap"
      onClick={() => { setSort((s) => ({ key, desc: s.key === key ? !s.desc : key === "metric" })); setOffset(0); }}>
      {label}{sort.key === key ? (sort.desc ? " ▼" : " ▲") : ""}
    </Table.ColumnHeader>
  );
  const toggle = (status: Status) => {
    setStatuses((s) => (s.includes(status) ? s.filter((x) => x !== status) : [...s, status]));
    setOffset(0);
  };
  const choose = (index: number) => {
    if (selected.includes(index)) onSelect(selected.filter((i) => i !== index));
    else if (selected.length < 5) onSelect([...selected, index]);
  };
  return (
    <Box data-testid="trial-table">
      <HStack gap={2} mb={3} flexWrap="wrap">
        <Input size="sm" maxW="260px" placeholder="Search id, parameters, message…" value={search}
          onChange={(e) => { setSearch(e.target.value); setOffset(0); }} data-testid="trial-search" />
        {STATUSES.map((status) => (
          <Button key={status} size="xs" variant={statuses.includes(status) ? "solid" : "outline"}
            onClick={() => toggle(status)} data-testid={`filter-${status}`}>
            {status.replace("_", " ").toLowerCase()} {summary?.counts[status] ? `(${summary.counts[status]})` : ""}
          </Button>
        ))}
      </HStack>
      {error && !data ? <ErrorBox error={error} /> : loading && !data ? <Loading /> : (
        <Box overflowX="auto">
          <Table.Root size="sm" interactive variant="outline">
            <Table.Header>
              <Table.Row>
                <Table.ColumnHeader title="select up to 5 to compare">⇆</Table.ColumnHeader>
                {header("index", "#")}
                <Table.ColumnHeader>Trial</Table.ColumnHeader>
                {header("status", "Status")}
                {objectives.length
                  ? <>
                      <Table.ColumnHeader title="in the Pareto set: no other trial is better on every objective">◆</Table.ColumnHeader>
                      {objectives.map((o, i) => header(i === 0 ? "metric" : `objective:${i}`, `${o.metric} (${o.mode === "maximize" ? "max" : "min"})`))}
                    </>
                  : header("metric", "Final metric")}
                {params.map((name) => header(`param:${name}`, name))}
                {header("duration", "Duration")}
                {header("platform", "Platform")}
                <Table.ColumnHeader>Intermediate</Table.ColumnHeader>
              </Table.Row>
            </Table.Header>
            <Table.Body>
              {(data?.rows ?? []).map((row) => {
                const flat = flatten(row.parameters);
                return (
                  <Table.Row key={row.trial_index} cursor="pointer" data-testid="trial-row"
                    data-index={row.trial_index} onClick={() => onOpen(row.trial_index)}>
                    <Table.Cell onClick={(e) => e.stopPropagation()}>
                      <input type="checkbox" aria-label={`compare trial ${row.trial_index}`}
                        checked={selected.includes(row.trial_index)} onChange={() => choose(row.trial_index)}
                        disabled={!selected.includes(row.trial_index) && selected.length >= 5} />
                    </Table.Cell>
                    <Table.Cell>{row.trial_index}</Table.Cell>
                    <Table.Cell fontFamily="mono" fontSize="xs">
                      <Link onClick={(e) => { e.preventDefault(); onOpen(row.trial_index); }}
                        href={`?experiment=${encodeURIComponent(experimentId)}&trial=${row.trial_index}`}>{row.trial_id}</Link>
                      {row.parameter_source === "customized" && !row.imported
                        ? <Text as="span" ml={1} px={1} borderRadius="sm" bg="purple.subtle" color="purple.fg" fontFamily="body"
                            title={`parameters chosen by ${row.added_by ?? "a person"} (parameter_source: customized)`}
                            data-testid="added-by-hand">added</Text>
                        : null}
                      {row.earlier_space
                        ? <Text as="span" ml={1} px={1} borderRadius="sm" bg="gray.subtle" color="fg.muted" fontFamily="body"
                            title={`asked under search space version ${row.space_version ?? 0}; the space has changed since (it reaches the tuner only where it fits the newest)`}
                            data-testid="earlier-space">earlier space</Text>
                        : null}
                      {row.mlflow_url
                        ? <Link ml={1} fontFamily="body" href={row.mlflow_url} target="_blank" rel="noopener noreferrer"
                            color="blue.fg" title="its nested run in MLflow" onClick={(e) => e.stopPropagation()}
                            data-testid="mlflow-link">MLflow</Link>
                        : null}
                    </Table.Cell>
                    <Table.Cell><StatusBadge status={row.status} /></Table.Cell>
                    {objectives.length
                      ? <>
                          <Table.Cell color="orange.fg" data-testid="pareto-mark">{row.pareto ? "◆" : ""}</Table.Cell>
                          {objectives.map((o) => <Table.Cell key={o.metric} fontFamily="mono" data-testid={`objective-${o.metric}`}>{formatValue(row.values?.[o.metric] ?? null)}</Table.Cell>)}
                        </>
                      : <Table.Cell fontFamily="mono" data-testid="metric">{formatValue(row.metric)}</Table.Cell>}
                    {params.map((name) => <Table.Cell key={name} fontFamily="mono" fontSize="xs">{formatValue(flat[name])}</Table.Cell>)}
                    <Table.Cell>{formatDuration(row.duration)}</Table.Cell>
                    <Table.Cell>{row.platform}{row.host ? ` (${row.host})` : ""}</Table.Cell>
                    <Table.Cell>{row.intermediate_count}</Table.Cell>
                  </Table.Row>
                );
              })}
            </Table.Body>
          </Table.Root>
        </Box>
      )}
      <HStack justifyContent="space-between" mt={2}>
        <Text fontSize="sm" color="fg.muted" data-testid="trial-count">
          {data ? `${data.total === 0 ? 0 : data.offset + 1}–${Math.min(data.offset + data.limit, data.total)} of ${data.total}` : ""}
        </Text>
        <HStack>
          <Button size="xs" variant="outline" disabled={offset === 0}
            onClick={() => setOffset(Math.max(0, offset - PAGE_SIZE))}>Previous</Button>
          <Button size="xs" variant="outline" disabled={!data || offset + PAGE_SIZE >= data.total}
            onClick={() => setOffset(offset + PAGE_SIZE)} data-testid="next-page">Next</Button>
        </HStack>
      </HStack>
    </Box>
  );
}
