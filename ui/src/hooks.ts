// State that lives outside React: Airflow's colour mode, the page's URL, periodic refresh.
import { useCallback, useEffect, useRef, useState } from "react";

/** Airflow's light/dark mode: next-themes puts the class on <html>. */
export function useColorMode(): "light" | "dark" {
  const read = () => (document.documentElement.classList.contains("dark") ? "dark" : "light");
  const [mode, setMode] = useState<"light" | "dark">(read);
  useEffect(() => {
    const observer = new MutationObserver(() => setMode(read()));
    observer.observe(document.documentElement, { attributes: true, attributeFilter: ["class", "style"] });
    return () => observer.disconnect();
  }, []);
  return mode;
}

const urlListeners = new Set<(search: string) => void>();

/** Query parameters of the current page as state (experiment, trial, tab, compare...): links
 * to a trial or an experiment can be shared, and Back works. Every component that uses it sees
 * a change made by any other. */
export function useUrlState(): [URLSearchParams, (changes: Record<string, string | null>, replace?: boolean) => void] {
  const [search, setSearch] = useState(() => window.location.search);
  useEffect(() => {
    const onPop = () => setSearch(window.location.search);
    urlListeners.add(setSearch);
    window.addEventListener("popstate", onPop);
    return () => {
      urlListeners.delete(setSearch);
      window.removeEventListener("popstate", onPop);
    };
  }, []);
  const update = useCallback((changes: Record<string, string | null>, replace = false) => {
    const params = new URLSearchParams(window.location.search);
    for (const [key, value] of Object.entries(changes)) {
      if (value === null || value === "") params.delete(key);
      else params.set(key, value);
    }
    const query = params.toString();
    const url = `${window.location.pathname}${query ? `?${query}` : ""}`;
    if (replace) window.history.replaceState(window.history.state, "", url);
    else window.history.pushState(window.history.state, "", url);
    for (const listener of urlListeners) listener(window.location.search);
  }, []);
  return [new URLSearchParams(search), update];
}

/** Load ``load()`` now and again every ``everyMs`` while ``live``; keeps the last data while
 * reloading (no flicker), reports the error of the last failed load. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[], live = false, everyMs = 5000, enabled = true) {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<Error | undefined>(undefined);
  const [loading, setLoading] = useState(true);
  const loadRef = useRef(load);
  loadRef.current = load;
  const run = useCallback(() => {
    let cancelled = false;
    loadRef.current()
      .then((value) => {
        if (!cancelled) {
          setData(value);
          setError(undefined);
        }
      })
      .catch((exc: Error) => !cancelled && setError(exc))
      .finally(() => !cancelled && setLoading(false));
    return () => {
      cancelled = true;
    };
  }, []);
  useEffect(() => {
    if (!enabled) return undefined;
    setLoading(true);
    return run();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, enabled]);
  useEffect(() => {
    if (!live || !enabled) return undefined;
    const timer = window.setInterval(run, everyMs);
    return () => window.clearInterval(timer);
  }, [live, everyMs, run, enabled]);
  // The run just ended: one last load, or what finished after the previous tick would never show.
  const wasLive = useRef(live);
  useEffect(() => {
    if (wasLive.current && !live && enabled) run();
    wasLive.current = live;
  }, [live, enabled, run]);
  return { data, error, loading, reload: run };
}
