from spotpool_deploy.cli import app

app(prog_name="python -m spotpool_deploy")
