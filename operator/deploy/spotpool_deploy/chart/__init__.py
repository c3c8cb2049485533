"""The Helm chart's generator, in steps: `settings` (each InstallConfig leaf and its
placeholder), `nodes` (a render with placeholders as a template tree), `merge` (a setting's on
and off renders merged under `{{ if }}`), `writer` (the tree as template text) and `values`
(values.yaml, values.schema.json). `spotpool_deploy.helm` puts the chart together."""
