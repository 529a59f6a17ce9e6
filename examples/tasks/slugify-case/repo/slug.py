def slugify(text):
    return "-".join(text.split())


def words(text):
    return len(text.split())
