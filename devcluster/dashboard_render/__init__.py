"""Pictures of the chart's Grafana dashboards, drawn as SVG from Prometheus data: the panels' own
PromQL run as range queries, laid out by the dashboards' gridPos. Grafana does not run on the dev
machine, so this draws what its panels would show. Standard library only.

``model`` reads the dashboard JSON and Prometheus' matrices, ``units`` formats values as Grafana's
units do, ``scale`` picks axis ticks, ``svg``, ``timeseries`` and ``stat`` draw one panel each,
``page`` lays a dashboard out, ``pictures`` is the command line (``make dashboard-pictures``).
"""
