"""What a person reads of a run: the AI-tax report and its figures, the live view and dashboard, and the Kibana and
Grafana files, all from the recorded events (`aitax.telemetry`) and the results (`aitax.runs`)."""
