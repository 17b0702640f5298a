// One trial: parameters, every intermediate result, final result, status message, where it ran,
// a tail of its log, and links to its Airflow task instance and its platform.
import { useMemo } from "react";
import { Box, Button, Code, HStack, Heading, Link, SimpleGrid, Table, Text, VStack } from "@chakra-ui/react";
import { type TrialDetail, apiUrl, getJson } from "./api";
import { Chart } from "./Chart";
import { detailOption } from "./charts";
import { TrialActions } from "./Actions";
import { ErrorBox, Fact, Loading, Panel, StatusBadge } from "./common";
import { useLoad } from "./hooks";
import { flatten, formatBytes, formatDuration, formatHandleValue, formatTime, formatValue, visible } from "./util";

export function TrialPage({ experimentId, index, onBack, onOpenTrial }: {
  experimentId: string; index: number; onBack: () => void; onOpenTrial?: (index: number) => void;
}) {
  const path = `experiments/${encodeURIComponent(experimentId)}/trials/${index}`;
  const first = useLoad(() => getJson<TrialDetail>(path), [path]);
  const live = first.data ? ["WAITING", "RUNNING"].includes(first.data.status) : false;
  const again = useLoad(() => getJson<TrialDetail>(path), [path], live);
  const trial = again.data ?? first.data;
  const option = useMemo(() => detailOption(trial?.intermediate ?? [], trial?.status ?? "RUNNING"), [trial]);
  if (first.error && !trial) return <ErrorBox error={first.error} />;
  if (!trial) return <Loading />;
  const flat = flatten(trial.parameters);
  // A time NNI never recorded is said as such (an imported trial has no time of this Airflow's).
  const unrecorded = trial.imported ? "unknown" : "";
  return (
    <VStack alignItems="stretch" gap={4} p={2} data-testid="trial-page">
      <HStack justifyContent="space-between">
        <Box>
          <Heading size="md">Trial {trial.trial_index} <Code fontSize="sm">{trial.trial_id}</Code></Heading>
          <Text fontSize="sm" color="fg.muted">experiment <Code fontSize="xs">{experimentId}</Code></Text>
        </Box>
        <HStack>
          <TrialActions experimentId={experimentId} index={trial.trial_index} status={trial.status}
            mayEdit={Boolean(trial.may_edit)} experimentActive={trial.experiment_active !== false} onChanged={again.reload} />
          <Button size="sm" variant="outline" onClick={onBack}>Back to the experiment</Button>
        </HStack>
      </HStack>
      <Panel>
        <HStack gap={8} flexWrap="wrap">
          <Fact label="Status"><StatusBadge status={trial.status} /></Fact>
          <Fact label="Final metric"><Text fontFamily="mono" data-testid="trial-metric">{trial.metric === null || trial.metric === undefined ? "–" : formatValue(trial.metric)}</Text></Fact>
          <Fact label="Duration"><Text as="span" data-testid="trial-duration">{formatDuration(trial.duration) || unrecorded}</Text></Fact>
          <Fact label="Started"><Text as="span" data-testid="trial-started">{formatTime(trial.started) || unrecorded}</Text></Fact>
          <Fact label="Platform">{trial.platform ?? "–"}{trial.host ? ` · ${trial.host}` : ""}</Fact>
          {trial.space_versions ? (
            <Fact label="Search space">
              <Text as="span" data-testid="trial-space-version">
                version {trial.space_version ?? 0}{(trial.space_version ?? 0) < trial.space_versions ? " (an earlier space)" : ""}
              </Text>
            </Fact>
          ) : null}
          <Fact label="Parameters from">
            <Text data-testid="parameter-source" title={`parameter_source: ${trial.parameter_source ?? "algorithm"}`}>
              {trial.imported
                ? (trial.parameter_source === "customized" ? "NNI's user (customized in NNI)" : "NNI's tuner")
                : trial.parameter_source === "customized" ? `added by ${visible(trial.added_by ?? "a person")}` : "the tuner"}
            </Text>
          </Fact>
        </HStack>
        {trial.message ? <Text mt={3} fontSize="sm" data-testid="trial-message">{visible(trial.message)}</Text> : null}
        {trial.airflow_actions?.length ? (
          <Text mt={1} fontSize="xs" color="fg.muted" data-testid="airflow-actions">
            In Airflow: {trial.airflow_actions.map((a) => `${formatTime(a.at)} ${visible(a.by ?? "?")} ${visible(a.event.replace(/_/g, " "))}${a.state ? ` (${visible(a.state)})` : ""}`).join("; ")}
          </Text>
        ) : null}
        {trial.lineage ? <Lineage lineage={trial.lineage} onOpenTrial={onOpenTrial} /> : null}
        {trial.restarts?.length ? (
          <Box mt={2} fontSize="sm" data-testid="trial-restarts">
            <Text fontWeight="semibold">
              Restarted {trial.restarts.length === 1 ? "once" : `${trial.restarts.length} times`} after a fault
            </Text>
            {trial.restarts.map((r) => (
              <Text key={r.attempt} fontSize="xs" color="fg.muted" data-testid={`trial-restart-${r.attempt}`}>
                {formatTime(r.at)}: start {r.attempt + 1}{" "}
                {r.step === null ? "from scratch (no checkpoint was kept)" : `from the checkpoint at step ${r.step}`}
                {" · "}{visible(r.reason)}
              </Text>
            ))}
          </Box>
        ) : null}
        <HStack mt={3} gap={3} flexWrap="wrap">
          {trial.links.map((link) => (
            <Button key={link.label} asChild size="xs" variant="outline"><a href={link.href} data-testid={`link-${link.label}`}>{link.label}</a></Button>
          ))}
        </HStack>
      </Panel>
      <SimpleGrid columns={{ base: 1, xl: 2 }} gap={4}>
        <Panel title="Parameters">
          <Table.Root size="sm">
            <Table.Body>
              {Object.entries(flat).map(([key, value]) => (
                <Table.Row key={key}><Table.Cell>{visible(key)}</Table.Cell><Table.Cell fontFamily="mono">{formatValue(value)}</Table.Cell></Table.Row>
              ))}
            </Table.Body>
          </Table.Root>
          {Object.keys(trial.final_extra ?? {}).length ? (
            <Text mt={3} fontSize="sm">Final result's other keys: <Code fontSize="xs">{JSON.stringify(trial.final_extra)}</Code></Text>
          ) : null}
        </Panel>
        <Panel title={`Intermediate results (${(trial.intermediate_total ?? trial.intermediate.length).toLocaleString()})`}>
          {trial.intermediate.length === 0 ? (
            <Text fontSize="sm" color="fg.muted" data-testid="no-intermediate">
              {["WAITING", "RUNNING"].includes(trial.status) ? "No intermediate results yet." : "This trial reported no intermediate results."}
            </Text>
          ) : (
            <>
              <Chart option={option} height={240} testId="trial-curve" />
              {trial.intermediate_total && trial.intermediate_total > trial.intermediate.length ? (
                <Text fontSize="xs" color="fg.muted" data-testid="downsampled">
                  Drawn from {trial.intermediate.length.toLocaleString()} of {trial.intermediate_total.toLocaleString()} points:
                  each stretch's lowest and highest, so no spike is hidden. The store keeps every point.
                </Text>
              ) : null}
              <Link fontSize="xs" href={apiUrl(`${path}/intermediate.csv`)} download data-testid="intermediate-csv">
                Every point as CSV
              </Link>
            </>
          )}
          <Box maxH="200px" overflowY="auto" mt={2} display={trial.intermediate.length ? "block" : "none"}>
            <Table.Root size="sm">
              <Table.Header><Table.Row><Table.ColumnHeader>step</Table.ColumnHeader><Table.ColumnHeader>value</Table.ColumnHeader></Table.Row></Table.Header>
              <Table.Body>
                {trial.intermediate.map(([step, value]) => (
                  <Table.Row key={step}><Table.Cell>{step}</Table.Cell><Table.Cell fontFamily="mono">{formatValue(value)}</Table.Cell></Table.Row>
                ))}
              </Table.Body>
            </Table.Root>
          </Box>
        </Panel>
      </SimpleGrid>
      {trial.artifacts?.length || trial.artifacts_error ? (
        <Panel title={`Artifacts (${trial.artifacts?.length ?? 0})`} testId="trial-artifacts">
          {trial.artifacts_error ? <Text fontSize="sm" color="red.500" data-testid="artifacts-error">{visible(trial.artifacts_error)}</Text> : null}
          <Table.Root size="sm">
            <Table.Body>
              {(trial.artifacts ?? []).map((a) => (
                <Table.Row key={a.name}>
                  <Table.Cell>
                    <Link href={apiUrl(`${path}/artifacts/${a.name.split("/").map(encodeURIComponent).join("/")}`)} download color="blue.fg" textDecoration="underline" data-testid={`artifact-${a.name}`}>
                      {visible(a.name)}
                    </Link>
                  </Table.Cell>
                  <Table.Cell fontFamily="mono" textAlign="end">{formatBytes(a.size)}</Table.Cell>
                </Table.Row>
              ))}
            </Table.Body>
          </Table.Root>
        </Panel>
      ) : null}
      <Panel title="Where it ran">
        {trial.location ? <Text fontSize="sm" mb={2}>{trial.location}</Text> : null}
        <Table.Root size="sm">
          <Table.Body>
            {Object.entries(trial.handle ?? {}).map(([key, value]) => (
              <Table.Row key={key}><Table.Cell>{key}</Table.Cell><Table.Cell fontFamily="mono" fontSize="xs">{formatHandleValue(key, value)}</Table.Cell></Table.Row>
            ))}
          </Table.Body>
        </Table.Root>
      </Panel>
      {trial.log.map((part) => (
        <Panel key={part.name} title={`Log: ${part.name} (last lines)`}>
          <Box as="pre" fontSize="xs" maxH="320px" overflow="auto" p={2} bg="bg.muted" borderRadius="sm"
            whiteSpace="pre-wrap" data-testid={`log-${part.name}`}>{part.text || "(empty)"}</Box>
        </Panel>
      ))}
      {trial.log.length === 0 && trial.imported
        ? <Text fontSize="sm" color="fg.muted" data-testid="imported-log">This trial ran in NNI, not in Airflow: its log stayed in the NNI experiment's folder.</Text>
        : null}
      {trial.log.length === 0 && !trial.imported ? <Text fontSize="sm" color="fg.muted">The trial's log is not readable from the Airflow API server; see the task instance's log{trial.location ? " or the folder above" : ""}.</Text> : null}
      <Link fontSize="sm" onClick={onBack}>← experiment</Link>
    </VStack>
  );
}

/** Where a Population Based Training trial stands: its generation, and the trial whose
 * checkpoint it started from (a link), copied and perturbed or its own line going on. */
function Lineage({ lineage, onOpenTrial }: {
  lineage: NonNullable<TrialDetail["lineage"]>; onOpenTrial?: (index: number) => void;
}) {
  const parent = lineage.parent_index;
  const link = parent === null ? null : (
    <Link color="blue.fg" data-testid="trial-parent" onClick={() => onOpenTrial?.(parent)} cursor="pointer">
      trial {parent}
    </Link>
  );
  return (
    <Box mt={2} fontSize="sm" data-testid="trial-lineage">
      <Text fontWeight="semibold">
        Population Based Training: generation {lineage.generation}, member {lineage.member}
      </Text>
      <Text fontSize="xs" color="fg.muted">
        {parent === null ? "First generation: parameters drawn at random, trained from scratch." : lineage.exploited
          ? <>In the worst fraction of its generation: took {link}&apos;s parameters, perturbed, and </>
          : <>Went on from its own line, {link}, with the same parameters, and </>}
        {parent === null ? null : lineage.loaded_step !== null
          ? `started from its checkpoint at step ${lineage.loaded_step}.`
          : `started from scratch: ${visible(lineage.note ?? "no checkpoint was given")}.`}
      </Text>
    </Box>
  );
}
