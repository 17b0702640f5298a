// 2-5 trials side by side: parameters, outcome and intermediate curves.
import { useMemo } from "react";
import { Box, Link, Table, Text } from "@chakra-ui/react";
import { type Curve, type Page, type Summary, getJson } from "./api";
import { Chart } from "./Chart";
import { curvesOption } from "./charts";
import { ErrorBox, Loading, Panel, StatusBadge } from "./common";
import { useLoad } from "./hooks";
import { columnNames } from "./TrialTable";
import { flatten, formatDuration, formatValue } from "./util";

export function Compare({ experimentId, selected, summary, onOpenTrial }: {
  experimentId: string; selected: number[]; summary: Summary; onOpenTrial: (index: number) => void;
}) {
  const id = encodeURIComponent(experimentId);
  const key = selected.join(",");
  const rows = useLoad(() => (selected.length ? getJson<Page>(`experiments/${id}/trials`, { indexes: key, limit: 5 })
    : Promise.resolve({ total: 0, offset: 0, limit: 5, rows: [] } as Page)), [id, key], summary.active);
  const curves = useLoad(() => (selected.length ? getJson<{ curves: Curve[] }>(`experiments/${id}/curves`, { trials: key })
    : Promise.resolve({ curves: [] })), [id, key], summary.active);
  const option = useMemo(() => (curves.data ? curvesOption(curves.data.curves) : {}), [curves.data]);
  if (selected.length < 2) {
    return <Text color="fg.muted" p={2}>Select 2 to 5 trials in the Trials tab to compare them.</Text>;
  }
  if (rows.error) return <ErrorBox error={rows.error} />;
  if (!rows.data) return <Loading />;
  const trials = [...rows.data.rows].sort((a, b) => selected.indexOf(a.trial_index) - selected.indexOf(b.trial_index));
  const flat = trials.map((t) => flatten(t.parameters));
  const names = columnNames(summary, trials.map((t) => t.parameters));
  const differs = (name: string) => new Set(flat.map((f) => formatValue(f[name]))).size > 1;
  return (
    <Box data-testid="compare">
      <Panel title="Side by side">
        <Table.Root size="sm" variant="outline">
          <Table.Header>
            <Table.Row>
              <Table.ColumnHeader />
              {trials.map((t) => (
                <Table.ColumnHeader key={t.trial_index}>
                  <Link onClick={() => onOpenTrial(t.trial_index)}>trial {t.trial_index}</Link>
                </Table.ColumnHeader>
              ))}
            </Table.Row>
          </Table.Header>
          <Table.Body>
            <Table.Row><Table.Cell>status</Table.Cell>{trials.map((t) => <Table.Cell key={t.trial_index}><StatusBadge status={t.status} /></Table.Cell>)}</Table.Row>
            <Table.Row><Table.Cell>final metric</Table.Cell>{trials.map((t) => <Table.Cell key={t.trial_index} fontFamily="mono">{formatValue(t.metric)}</Table.Cell>)}</Table.Row>
            <Table.Row><Table.Cell>duration</Table.Cell>{trials.map((t) => <Table.Cell key={t.trial_index}>{formatDuration(t.duration)}</Table.Cell>)}</Table.Row>
            {names.map((name) => (
              <Table.Row key={name} fontWeight={differs(name) ? "semibold" : undefined}>
                <Table.Cell>{name}</Table.Cell>
                {flat.map((f, i) => <Table.Cell key={trials[i].trial_index} fontFamily="mono" fontSize="xs">{formatValue(f[name])}</Table.Cell>)}
              </Table.Row>
            ))}
          </Table.Body>
        </Table.Root>
        <Text fontSize="xs" color="fg.muted" mt={1}>Rows in bold differ between the trials.</Text>
      </Panel>
      <Box mt={4}>
        <Panel title="Intermediate results"><Chart option={option} testId="compare-curves" /></Panel>
      </Box>
    </Box>
  );
}
