// Every experiment in the store (running, finished, or of a DAG that is gone): sortable, searchable.
import { useMemo, useState } from "react";
import { Box, Heading, HStack, Input, Link, Table, Text } from "@chakra-ui/react";
import { type ExperimentRow, getJson } from "./api";
import { ErrorBox, Loading, StatusBadge, StatusCounts } from "./common";
import { useLoad } from "./hooks";
import { formatDuration, formatTime, formatValue, visible } from "./util";

type Key = "experiment_id" | "name" | "dag_id" | "platform" | "tuner" | "trials" | "best" | "started" | "duration" | "state";

const COLUMNS: [Key, string][] = [
  ["experiment_id", "Experiment"], ["name", "Name"], ["dag_id", "DAG / run"], ["state", "Status"],
  ["platform", "Platform"], ["tuner", "Tuner"], ["trials", "Trials"], ["best", "Best metric"],
  ["started", "Started"], ["duration", "Duration"],
];

function sortValue(row: ExperimentRow, key: Key): string | number {
  if (key === "duration") return row.started ? (row.ended ?? Date.now() / 1000) - row.started : -1;
  const value = row[key as keyof ExperimentRow];
  if (typeof value === "number") return value;
  return value === null || value === undefined ? "" : String(value).toLowerCase();
}

export function ExperimentList({ dagId, onOpen }: { dagId?: string; onOpen: (row: ExperimentRow) => void }) {
  const { data, error, loading } = useLoad(
    () => getJson<{ experiments: ExperimentRow[] }>("experiments", { dag_id: dagId }), [dagId], true, 10000);
  const [search, setSearch] = useState("");
  const [sort, setSort] = useState<{ key: Key; desc: boolean }>({ key: "started", desc: true });
  const rows = useMemo(() => {
    const needle = search.toLowerCase();
    const found = (data?.experiments ?? []).filter((r) => !needle || [r.experiment_id, r.name, r.dag_id, r.run_id,
      r.platform, r.tuner, r.state].some((v) => (v ?? "").toLowerCase().includes(needle)));
    return [...found].sort((a, b) => {
      const x = sortValue(a, sort.key);
      const y = sortValue(b, sort.key);
      const order = x < y ? -1 : x > y ? 1 : 0;
      return sort.desc ? -order : order;
    });
  }, [data, search, sort]);
  if (error && !data) return <ErrorBox error={error} />;
  if (loading && !data) return <Loading />;
  return (
    <Box p={dagId ? 0 : 2} data-testid="experiment-list">
      <HStack justifyContent="space-between" mb={3} gap={4}>
        <Heading size="md">{dagId ? "Experiments of this DAG" : "Experiments"}</Heading>
        <Input size="sm" maxW="320px" placeholder="Search id, name, DAG, platform…" value={search}
          onChange={(e) => setSearch(e.target.value)} data-testid="experiment-search" />
      </HStack>
      {rows.length === 0 ? (
        <Text color="fg.muted">{data?.experiments.length ? "No experiment matches." : "No trialflow experiments yet."}</Text>
      ) : (
        <Table.Root size="sm" interactive variant="outline">
          <Table.Header>
            <Table.Row>
              {COLUMNS.map(([key, label]) => (
                <Table.ColumnHeader key={key} cursor="pointer" userSelect="none" data-sort={key}
                  onClick={() => setSort((s) => ({ key, desc: s.key === key ? !s.desc : key !== "experiment_id" }))}>
                  {label}{sort.key === key ? (sort.desc ? " ▼" : " ▲") : ""}
                </Table.ColumnHeader>
              ))}
            </Table.Row>
          </Table.Header>
          <Table.Body>
            {rows.map((row) => (
              <Table.Row key={row.experiment_id} cursor="pointer" onClick={() => onOpen(row)}
                data-testid="experiment-row">
                <Table.Cell><Link fontFamily="mono" onClick={(e) => { e.preventDefault(); onOpen(row); }}
                  href={`?experiment=${encodeURIComponent(row.experiment_id)}`}>{row.experiment_id}</Link></Table.Cell>
                <Table.Cell>{visible(row.name)}{row.imported_from ? <Text fontSize="xs" color="fg.muted" data-testid="list-imported">imported from NNI {row.imported_from}</Text> : null}</Table.Cell>
                <Table.Cell>
                  <Text>{row.dag_id}{row.task_group ? <Text as="span" color="fg.muted"> · {row.task_group}</Text> : null}{row.dag_exists ? "" : " (DAG gone)"}</Text>
                  <Text fontSize="xs" color="fg.muted">{row.run_id}</Text>
                </Table.Cell>
                <Table.Cell><StatusBadge status={row.state} /></Table.Cell>
                <Table.Cell>{row.platform}</Table.Cell>
                <Table.Cell>{row.tuner}</Table.Cell>
                <Table.Cell><StatusCounts counts={row.counts} /></Table.Cell>
                <Table.Cell fontFamily="mono" data-testid="list-best">
                  {row.pareto_size !== null && row.pareto_size !== undefined ? `Pareto set of ${row.pareto_size}` : formatValue(row.best)}
                </Table.Cell>
                <Table.Cell>{formatTime(row.started)}</Table.Cell>
                <Table.Cell>{formatDuration(row.started ? (row.ended ?? Date.now() / 1000) - row.started : null)}</Table.Cell>
              </Table.Row>
            ))}
          </Table.Body>
        </Table.Root>
      )}
    </Box>
  );
}
