from hango.cli import command

command()
