// An ECharts chart that follows Airflow's colour mode and its container's size.
import { useEffect, useRef } from "react";
import { Box } from "@chakra-ui/react";
import * as echarts from "echarts/core";
import { BarChart, LineChart, LinesChart, ParallelChart, ScatterChart } from "echarts/charts";
import {
  DataZoomComponent,
  GridComponent,
  LegendComponent,
  MarkPointComponent,
  ParallelComponent,
  TitleComponent,
  TooltipComponent,
  VisualMapComponent,
} from "echarts/components";
import { CanvasRenderer } from "echarts/renderers";
import { useColorMode } from "./hooks";

echarts.use([BarChart, LineChart, LinesChart, ParallelChart, ScatterChart, DataZoomComponent, GridComponent,
  LegendComponent, MarkPointComponent, ParallelComponent, TitleComponent, TooltipComponent, VisualMapComponent,
  CanvasRenderer]);

export type Option = echarts.EChartsCoreOption;

export function Chart({ option, height = 320, testId, onClick }: {
  option: Option;
  height?: number;
  testId?: string;
  onClick?: (params: { data?: unknown; seriesName?: string; dataIndex?: number; value?: unknown }) => void;
}) {
  const ref = useRef<HTMLDivElement>(null);
  const chart = useRef<echarts.ECharts | null>(null);
  const mode = useColorMode();
  useEffect(() => {
    if (!ref.current) return undefined;
    const instance = echarts.init(ref.current, mode === "dark" ? "dark" : undefined, { renderer: "canvas" });
    chart.current = instance;
    let observed = false;  // the observer reports the initial size at once: not a resize
    const resize = new ResizeObserver(() => {
      if (observed) instance.resize();
      observed = true;
    });
    resize.observe(ref.current);
    return () => {
      resize.disconnect();
      instance.dispose();
      chart.current = null;
    };
  }, [mode]);
  useEffect(() => {
    const instance = chart.current;
    if (!instance) return;
    // data-drawn counts renders that completed: tests and benchmarks wait on it, not on pixels.
    instance.off("finished");
    instance.on("finished", () => {
      if (ref.current) {
        ref.current.dataset.drawn = String(Number(ref.current.dataset.drawn ?? 0) + 1);
        ref.current.dataset.drawnAt = String(Math.round(performance.now()));
      }
    });
    instance.setOption({ backgroundColor: "transparent", ...option }, { notMerge: true });
  }, [option, mode]);
  useEffect(() => {
    const instance = chart.current;
    if (!instance || !onClick) return undefined;
    instance.on("click", onClick as never);
    return () => {
      instance.off("click");
    };
  }, [onClick, mode]);
  return <Box ref={ref} height={`${height}px`} width="100%" data-testid={testId} />;
}
