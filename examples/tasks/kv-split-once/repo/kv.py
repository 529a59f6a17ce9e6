def parse_kv(line):
    key, value = line.split("=")
    return key.strip(), value.strip()
