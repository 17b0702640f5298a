// An ECharts chart that follows Airflow's colour mode and its container's size.
import { useEffect, useRef } from "react";
import { Box } from "@chakra-ui/react";
import * as echarts from "echarts/core";
import { BarChart, CustomChart, LineChart, ParallelChart, ScatterChart } from "echarts/charts";
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

echarts.use([BarChart, CustomChart, LineChart, ParallelChart, ScatterChart, DataZoomComponent, GridComponent,
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
    const resize = new ResizeObserver(() => instance.resize());
    resize.observe(ref.current);
    return () => {
      resize.disconnect();
      instance.dispose();
      chart.current = null;
    };
  }, [mode]);
  useEffect(() => {
    chart.current?.setOption({ backgroundColor: "transparent", ...option }, { notMerge: true, lazyUpdate: true });
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
