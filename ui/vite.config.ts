// One self-contained script for Airflow's UI: React, ReactDOM, the JSX runtime, Chakra UI and
// Emotion are Airflow's own (it puts them on globalThis for plugins); ECharts is bundled.
import { defineConfig } from "vite";

const globals: Record<string, string> = {
  react: "React",
  "react-dom": "ReactDOM",
  "react/jsx-runtime": "ReactJSXRuntime",
  "@chakra-ui/react": "ChakraUI",
  "@emotion/react": "EmotionReact",
};

export default defineConfig({
  define: { "process.env.NODE_ENV": JSON.stringify("production") },
  esbuild: { jsx: "automatic" },
  build: {
    outDir: "../trialflow/ui/static",
    emptyOutDir: false,
    minify: true,
    sourcemap: false,
    lib: {
      entry: "src/main.tsx",
      formats: ["iife"],
      name: "TrialflowPages",
      fileName: () => "trialflow.js",
    },
    rollupOptions: {
      external: Object.keys(globals),
      output: { globals },
    },
  },
});
