// Pieces every page uses: status badges, panels, key/value lists, errors.
import type { ReactNode } from "react";
import { Badge, Box, Heading, HStack, Spinner, Text } from "@chakra-ui/react";
import type { Status } from "./api";
import { STATUS_PALETTE } from "./util";

const RUN_PALETTE: Record<string, string> = {
  running: "blue", queued: "gray", success: "green", failed: "red", finished: "green", stopped: "orange", "dag gone": "gray",
};

export function StatusBadge({ status }: { status: Status | string }) {
  const palette = STATUS_PALETTE[status as Status] ?? RUN_PALETTE[String(status)] ?? "gray";
  return (
    <Badge colorPalette={palette} variant="subtle" data-status={status}>
      {String(status).replace("_", " ").toLowerCase()}
    </Badge>
  );
}

export function Panel({ title, children, actions, testId }: {
  title?: ReactNode; children: ReactNode; actions?: ReactNode; testId?: string;
}) {
  return (
    <Box borderWidth="1px" borderColor="border" borderRadius="md" bg="bg.panel" p={4} data-testid={testId}>
      {(title || actions) && (
        <HStack justifyContent="space-between" mb={3}>
          {title ? <Heading size="sm">{title}</Heading> : <span />}
          {actions}
        </HStack>
      )}
      {children}
    </Box>
  );
}

export function Fact({ label, children }: { label: string; children: ReactNode }) {
  return (
    <Box minW="120px">
      <Text fontSize="xs" color="fg.muted">{label}</Text>
      <Box fontSize="md" fontWeight="semibold">{children}</Box>
    </Box>
  );
}

export function Loading() {
  return (
    <HStack p={4} gap={2}>
      <Spinner size="sm" />
      <Text color="fg.muted">Loading…</Text>
    </HStack>
  );
}

export function ErrorBox({ error }: { error: Error }) {
  const status = (error as { status?: number }).status;
  const text = status === 401 ? "Your session has ended: log in to Airflow again."
    : status === 403 ? "You may not read this experiment's DAG."
      : status === 404 ? "No such experiment in the trialflow store."
        : error.message;
  return (
    <Box borderWidth="1px" borderColor="red.500" borderRadius="md" p={3} color="red.500" data-testid="error">
      {text}
    </Box>
  );
}

export function StatusCounts({ counts }: { counts: Partial<Record<Status, number>> }) {
  const entries = Object.entries(counts).filter(([, n]) => n);
  return (
    <HStack gap={2} flexWrap="wrap">
      {entries.map(([status, n]) => (
        <HStack key={status} gap={1}>
          <StatusBadge status={status} />
          <Text fontSize="sm">{n}</Text>
        </HStack>
      ))}
    </HStack>
  );
}
