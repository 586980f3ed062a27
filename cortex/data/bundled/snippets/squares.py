squares = [i * i for i in range(10) if i % 2 == 0]
print(sum(squares))
